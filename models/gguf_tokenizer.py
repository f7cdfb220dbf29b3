"""Build a Hugging Face fast tokenizer from GGUF metadata, without torch.

transformers can read a GGUF tokenizer only through torch; the `tokenizers` library alone is
enough to rebuild the two BPE kinds Llama-family GGUFs carry: byte-level (vocabulary + merges)
and SentencePiece (vocabulary + scores, with byte fallback).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import (
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
)

from lazymlx.errors import LazymlxError

UNKNOWN_TOKEN = 2  # GGUF token types: <unk>
CONTROL_TOKEN = 3  # special tokens (<|im_start|>, <s>, <|eot_id|>, ...)
USER_DEFINED_TOKEN = 4

_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Qwen2's split: Llama 3's, but every digit on its own
_QWEN2_SPLIT = _LLAMA3_SPLIT.replace(r"\p{N}{1,3}", r"\p{N}")
_REGEX_SPLITS = {"llama-bpe": _LLAMA3_SPLIT, "llama3": _LLAMA3_SPLIT, "qwen2": _QWEN2_SPLIT}


def _pre_tokenizer(pre: str) -> pre_tokenizers.PreTokenizer:
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in ("gpt2", "default"):
        return byte_level
    if pre == "smollm":
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_REGEX_SPLITS[pre]), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


def _byte_level_bpe(metadata: dict[str, Any]) -> Tokenizer:
    """GPT-2 style tokenizers (SmolLM2, Llama 3): merges are stored, text is split by a regex."""
    tokens: list[str] = metadata["tokenizer.ggml.tokens"]
    pre = metadata.get("tokenizer.ggml.pre", "default")
    tokenizer = Tokenizer(
        models.BPE(
            vocab={token: i for i, token in enumerate(tokens)},
            merges=[tuple(m.split(" ")) for m in metadata["tokenizer.ggml.merges"]],
            ignore_merges=pre in ("llama-bpe", "llama3"),
        )
    )
    if pre == "qwen2":
        tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = _pre_tokenizer(pre)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    return tokenizer


def _sentencepiece_merges(ids: dict[str, int], scores: list[float]) -> list[tuple[str, str]]:
    """SentencePiece BPE stores piece scores, not merges: a piece that splits into two known
    pieces is a merge, and a higher score merges earlier (as transformers' converter does)."""
    tokens = list(ids)
    merges = []
    for token, score in zip(tokens, scores, strict=True):
        pairs = [(token[:i], token[i:]) for i in range(1, len(token))]
        known = [(left, right) for left, right in pairs if left in ids and right in ids]
        merges += [(-score, ids[left], ids[right], left, right) for left, right in known]
    return [(left, right) for *_, left, right in sorted(merges)]


def _sentencepiece_bpe(metadata: dict[str, Any]) -> Tokenizer:
    """Llama 2 / Mistral style: '▁' for spaces, unknown characters fall back to byte tokens."""
    tokens: list[str] = metadata["tokenizer.ggml.tokens"]
    scores = metadata.get("tokenizer.ggml.scores") or [0.0] * len(tokens)
    unknown = tokens[metadata.get("tokenizer.ggml.unknown_token_id", 0)]
    vocab = {token: i for i, token in enumerate(tokens)}
    tokenizer = Tokenizer(
        models.BPE(
            vocab=vocab,
            merges=_sentencepiece_merges(vocab, scores),
            unk_token=unknown,
            fuse_unk=True,
            byte_fallback=True,
        )
    )
    space_prefix = metadata.get("tokenizer.ggml.add_space_prefix", True)
    replace_spaces = normalizers.Replace(" ", "▁")
    tokenizer.normalizer = (
        normalizers.Sequence([normalizers.Prepend("▁"), replace_spaces])
        if space_prefix
        else replace_spaces
    )
    steps = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    tokenizer.decoder = decoders.Sequence(
        steps + [decoders.Strip(content=" ", left=1, right=0)] if space_prefix else steps
    )
    return tokenizer


def _adds_bos(metadata: dict[str, Any]) -> bool:
    """SentencePiece Llamas prepend <s> unless the file says otherwise; byte-level BPEs don't."""
    default = metadata.get("tokenizer.ggml.model") == "llama"
    return bool(metadata.get("tokenizer.ggml.add_bos_token", default))


_BUILDERS = {"gpt2": _byte_level_bpe, "llama": _sentencepiece_bpe}
_BYTE_LEVEL_PRE = ("gpt2", "default", "smollm", *_REGEX_SPLITS)


def check_tokenizer(metadata: dict[str, Any]) -> None:
    """Refuse, from the metadata alone, a tokenizer this module can't rebuild."""
    kind = metadata.get("tokenizer.ggml.model")
    if kind not in _BUILDERS:
        raise LazymlxError(
            f"GGUF tokenizer model {kind!r} is not supported (supported: {', '.join(_BUILDERS)}); "
            "use the model's mlx-community version instead"
        )
    pre = metadata.get("tokenizer.ggml.pre", "default")
    if kind == "gpt2" and pre not in _BYTE_LEVEL_PRE:
        raise LazymlxError(
            f"GGUF pre-tokenizer {pre!r} is not supported (supported: "
            f"{', '.join(_BYTE_LEVEL_PRE)}); add its split to lazymlx/models/gguf_tokenizer.py"
        )


def build_tokenizer(metadata: dict[str, Any]) -> Tokenizer:
    check_tokenizer(metadata)
    tokenizer = _BUILDERS[metadata["tokenizer.ggml.model"]](metadata)
    tokens: list[str] = metadata["tokenizer.ggml.tokens"]
    token_types = metadata.get("tokenizer.ggml.token_type", [])
    tokenizer.add_special_tokens(
        [
            AddedToken(tokens[i], special=True, normalized=False)
            for i, token_type in enumerate(token_types)
            if token_type in (UNKNOWN_TOKEN, CONTROL_TOKEN)
        ]
    )
    tokenizer.add_tokens(
        [
            AddedToken(tokens[i], normalized=False)
            for i, token_type in enumerate(token_types)
            if token_type == USER_DEFINED_TOKEN
        ]
    )
    bos_id = metadata.get("tokenizer.ggml.bos_token_id")
    if _adds_bos(metadata) and bos_id is not None:
        bos = tokens[bos_id]
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 $B:1", special_tokens=[(bos, bos_id)]
        )
    return tokenizer


def tokenizer_config(metadata: dict[str, Any]) -> dict[str, Any]:
    """tokenizer_config.json: the chat template and the special tokens transformers expects."""
    tokens = metadata["tokenizer.ggml.tokens"]

    def token(key: str) -> str | None:
        index = metadata.get(f"tokenizer.ggml.{key}_token_id")
        return tokens[index] if index is not None else None

    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "clean_up_tokenization_spaces": False,
        "add_bos_token": _adds_bos(metadata),
        "bos_token": token("bos"),
        "eos_token": token("eos"),
        "unk_token": token("unknown"),
        "pad_token": token("padding"),
    }
    if "tokenizer.chat_template" in metadata:
        config["chat_template"] = metadata["tokenizer.chat_template"]
    context = f"{metadata.get('general.architecture', 'llama')}.context_length"
    if context in metadata:
        config["model_max_length"] = int(metadata[context])
    return {k: v for k, v in config.items() if v is not None}


def write_tokenizer(metadata: dict[str, Any], out_dir: Path) -> None:
    build_tokenizer(metadata).save(str(out_dir / "tokenizer.json"))
    (out_dir / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(metadata), indent=2))
