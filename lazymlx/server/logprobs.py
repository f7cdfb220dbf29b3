"""The logprobs fields of a reply: each token's text and bytes, in chat's shape and the
completions' columns."""

from __future__ import annotations

from typing import Any

from mlx_lm.tokenizer_utils import (
    BPEStreamingDetokenizer,
    SPMStreamingDetokenizer,
    TokenizerWrapper,
)

from lazymlx.generation import Response


def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet read back: each symbol to the byte it stands for. The
    printable bytes stand for themselves; the others were moved up to chr(256 + n), in order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    moved = [byte for byte in range(256) if byte not in printable]
    return {chr(byte): byte for byte in printable} | {
        chr(256 + n): byte for n, byte in enumerate(moved)
    }


BYTE_LEVEL_ALPHABET = _byte_level_alphabet()


class TokenTexts:
    """A token's text and bytes for logprobs (a byte-level token may hold part of a character,
    whose bytes OpenAI's `bytes` field carries)."""

    def __init__(self, tokenizer: TokenizerWrapper) -> None:
        self.tokenizer = tokenizer
        self.detokenizer = tokenizer.detokenizer  # which scheme maps ids to bytes

    def text(self, token: int) -> str:
        return self.bytes(token).decode(errors="replace")

    def bytes(self, token: int) -> bytes:
        if isinstance(self.detokenizer, BPEStreamingDetokenizer):
            symbols, table = self.tokenizer.convert_ids_to_tokens(token), BYTE_LEVEL_ALPHABET
            return b"".join(bytes([table[c]]) if c in table else c.encode() for c in symbols or "")
        if isinstance(self.detokenizer, SPMStreamingDetokenizer):
            return self.detokenizer.tokenmap[token].replace("\u2581".encode(), b" ")
        return self.tokenizer.decode([token]).encode()

    def entry(self, token: int, logprob: float) -> dict[str, Any]:
        """Chat's shape: token text, logprob and bytes."""
        raw = self.bytes(token)
        return {"token": raw.decode(errors="replace"), "logprob": logprob, "bytes": list(raw)}

    def chat(self, responses: list[Response]) -> dict[str, Any]:
        """Chat's `logprobs`: one entry per token with its `top_logprobs`."""
        content = [
            self.entry(r.token, r.token_logprob)
            | {"top_logprobs": [self.entry(t, lp) for t, lp in r.top_logprobs]}
            for r in responses
        ]
        return {"content": content, "refusal": None}

    def completion(self, responses: list[Response], offset: int) -> dict[str, Any]:
        """The completions' `logprobs`: columns, text offsets counted from `offset`, and each
        token's alternatives with the sampled one among them, as OpenAI gives them."""
        tokens, offsets, tops = [], [], []
        for r in responses:
            text = self.text(r.token)
            tokens.append(text)
            offsets.append(offset)
            offset += len(text)
            alternatives = {self.text(t): logprob for t, logprob in r.top_logprobs}
            tops.append(alternatives | {text: r.token_logprob})
        return {
            "tokens": tokens,
            "token_logprobs": [r.token_logprob for r in responses],
            "top_logprobs": tops,
            "text_offset": offsets,
        }
