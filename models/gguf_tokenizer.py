"""Build a Hugging Face fast tokenizer from GGUF metadata, without torch.

transformers can read a GGUF tokenizer only through torch; the `tokenizers` library alone is
enough to rebuild a byte-level BPE tokenizer from the vocabulary, merges and token types.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

from lazymlx.errors import LazymlxError

CONTROL_TOKEN = 3  # GGUF token type of special tokens (<|im_start|>, <|eot_id|>, ...)
USER_DEFINED_TOKEN = 4

_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _pre_tokenizer(pre: str) -> pre_tokenizers.PreTokenizer:
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in ("gpt2", "default"):
        return byte_level
    if pre == "smollm":
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    if pre in ("llama-bpe", "llama3"):
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    raise LazymlxError(
        f"GGUF pre-tokenizer {pre!r} is not supported (supported: gpt2, smollm, llama-bpe); "
        "use the model's mlx-community version instead"
    )


def build_tokenizer(metadata: dict[str, Any]) -> Tokenizer:
    kind = metadata.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise LazymlxError(
            f"GGUF tokenizer model {kind!r} is not supported (only byte-level BPE, 'gpt2'); "
            "use the model's mlx-community version instead"
        )
    tokens: list[str] = metadata["tokenizer.ggml.tokens"]
    merges = [tuple(m.split(" ")) for m in metadata["tokenizer.ggml.merges"]]
    pre = metadata.get("tokenizer.ggml.pre", "default")
    tokenizer = Tokenizer(
        models.BPE(
            vocab={token: i for i, token in enumerate(tokens)},
            merges=merges,
            ignore_merges=pre in ("llama-bpe", "llama3"),
        )
    )
    tokenizer.pre_tokenizer = _pre_tokenizer(pre)
    tokenizer.decoder = decoders.ByteLevel()
    token_types = metadata.get("tokenizer.ggml.token_type", [])
    tokenizer.add_special_tokens(
        [
            AddedToken(tokens[i], special=True, normalized=False)
            for i, kind in enumerate(token_types)
            if kind == CONTROL_TOKEN
        ]
    )
    tokenizer.add_tokens(
        [
            AddedToken(tokens[i], normalized=False)
            for i, kind in enumerate(token_types)
            if kind == USER_DEFINED_TOKEN
        ]
    )
    bos_id = metadata.get("tokenizer.ggml.bos_token_id")
    if metadata.get("tokenizer.ggml.add_bos_token", False) and bos_id is not None:
        bos = tokens[bos_id]
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 $B:1", special_tokens=[(bos, bos_id)]
        )
    else:
        tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
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
        "add_bos_token": bool(metadata.get("tokenizer.ggml.add_bos_token", False)),
        "bos_token": token("bos"),
        "eos_token": token("eos"),
        "unk_token": token("unknown"),
        "pad_token": token("padding"),
    }
    if "tokenizer.chat_template" in metadata:
        config["chat_template"] = metadata["tokenizer.chat_template"]
    if "llama.context_length" in metadata:
        config["model_max_length"] = int(metadata["llama.context_length"])
    return {k: v for k, v in config.items() if v is not None}


def write_tokenizer(metadata: dict[str, Any], out_dir: Path) -> None:
    build_tokenizer(metadata).save(str(out_dir / "tokenizer.json"))
    (out_dir / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(metadata), indent=2))
