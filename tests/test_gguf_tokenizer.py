"""Tokenizers rebuilt from GGUF metadata: SentencePiece (scores + byte fallback) and byte-level BPE."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlx_lm.tokenizer_utils import SPMStreamingDetokenizer
from mlx_lm.tokenizer_utils import load as load_tokenizer

from lazymlx.errors import LazymlxError
from lazymlx.models.gguf_tokenizer import (
    CONTROL_TOKEN,
    UNKNOWN_TOKEN,
    build_tokenizer,
    write_tokenizer,
)
from lazymlx.models.tiny import tokenizer_metadata

BYTE_TOKEN, NORMAL_TOKEN = 6, 1
PIECES = {  # piece: score; a merged piece's score sets its merge's priority
    "▁t": -1.0,
    "he": -2.0,
    "▁the": -3.0,
    "▁c": -4.0,
    "at": -5.0,
    "▁cat": -6.0,
    "▁": -10.0,
    "t": -11.0,
    "h": -12.0,
    "e": -13.0,
    "c": -14.0,
    "a": -15.0,
}


def sentencepiece_metadata() -> dict:
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + list(PIECES)
    types = [UNKNOWN_TOKEN, CONTROL_TOKEN, CONTROL_TOKEN] + [BYTE_TOKEN] * 256
    return {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": [0.0] * 259 + list(PIECES.values()),
        "tokenizer.ggml.token_type": types + [NORMAL_TOKEN] * len(PIECES),
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.unknown_token_id": 0,
        "tokenizer.chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}",
    }


def test_sentencepiece_merges_by_score_and_adds_bos():
    metadata = sentencepiece_metadata()
    tokenizer = build_tokenizer(metadata)
    encoding = tokenizer.encode("the cat")
    assert encoding.tokens == ["<s>", "▁the", "▁cat"]
    assert tokenizer.decode(encoding.ids, skip_special_tokens=True) == "the cat"


def test_sentencepiece_falls_back_to_bytes_for_unknown_characters():
    tokenizer = build_tokenizer(sentencepiece_metadata())
    encoding = tokenizer.encode("the €")
    assert encoding.tokens[-3:] == ["<0xE2>", "<0x82>", "<0xAC>"]
    assert tokenizer.decode(encoding.ids, skip_special_tokens=True) == "the €"


def test_sentencepiece_directory_gets_mlx_lm_spm_detokenizer(tmp_path: Path):
    write_tokenizer(sentencepiece_metadata(), tmp_path)
    tokenizer = load_tokenizer(tmp_path)
    assert isinstance(tokenizer.detokenizer, SPMStreamingDetokenizer)
    ids = tokenizer.encode("the cat the")
    assert ids[0] == 1
    detokenizer = tokenizer.detokenizer
    detokenizer.reset()
    for token in ids[1:]:
        detokenizer.add_token(token)
    detokenizer.finalize()
    assert detokenizer.text == "the cat the"


def test_byte_level_without_bos():
    tokenizer = build_tokenizer(tokenizer_metadata())
    assert tokenizer.encode("the").tokens == ["t", "he"]


def test_unknown_tokenizer_model_is_a_clear_error():
    with pytest.raises(LazymlxError, match="tokenizer model 'bert' is not supported"):
        build_tokenizer(tokenizer_metadata() | {"tokenizer.ggml.model": "bert"})


def test_unknown_pre_tokenizer_is_a_clear_error():
    with pytest.raises(LazymlxError, match="pre-tokenizer 'deepseek-coder' is not supported"):
        build_tokenizer(tokenizer_metadata() | {"tokenizer.ggml.pre": "deepseek-coder"})
