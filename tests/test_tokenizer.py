"""The tokenizer rebuilt from GGUF metadata behaves like SmolLM2's: byte-level BPE, single digits."""

from __future__ import annotations

import pytest

TEXTS = [
    "The capital of France is Paris.",
    "  leading spaces, tabs\tand\nnewlines\n\n",
    "digits 1234567890 and 3.14159",
    "unicode: café, naïve, 東京, emoji 🙂",
    "code: def f(x):\n    return x ** 2  # square",
]


@pytest.mark.real_model
@pytest.mark.parametrize("text", TEXTS)
def test_real_tokenizer_round_trips(real, text):
    _, tokenizer = real
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


@pytest.mark.real_model
def test_real_tokenizer_splits_digits_and_keeps_specials_whole(real):
    _, tokenizer = real
    digits = tokenizer.encode("2024", add_special_tokens=False)
    assert [tokenizer.decode([t]) for t in digits] == ["2", "0", "2", "4"]
    assert tokenizer.encode("<|im_start|>user<|im_end|>", add_special_tokens=False)[0] == 1
    assert tokenizer.encode("<|im_start|>user<|im_end|>", add_special_tokens=False)[-1] == 2
    assert tokenizer.encode("hello", add_special_tokens=True) == tokenizer.encode(
        "hello", add_special_tokens=False
    )  # SmolLM2 adds no BOS


@pytest.mark.real_model
def test_real_streaming_detokenizer_rebuilds_text(real):
    _, tokenizer = real
    text = "unicode: café, 東京 🙂 and Paris."
    detokenizer = tokenizer.detokenizer
    detokenizer.reset()
    for token in tokenizer.encode(text, add_special_tokens=False):
        detokenizer.add_token(token)
    detokenizer.finalize()
    assert detokenizer.text == text
