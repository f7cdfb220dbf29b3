"""The engine on the real default model (SmolLM2-135M, 30 layers) at short prompt lengths."""

from __future__ import annotations

import mlx.core as mx
import pytest
from conftest import assert_keep_all_reproduces_stock

import lazymlx
from lazymlx import LazyConfig
from lazymlx.engine.config import PRESETS
from lazymlx.engine.presets import resolve_preset
from lazymlx.models.registry import DEFAULT_MODEL
from lazymlx.prompts import passkey_prompt
from lazymlx.session import ChatSession

pytestmark = pytest.mark.real_model


@pytest.mark.parametrize(
    "config",
    # keep-all through mlx-lm's forward pass, and through the lazy prompt step (a ratio that
    # rounds up to every token of a prompt this short)
    [LazyConfig(), LazyConfig(schedule=((0.5, 0.999),))],
    ids=["keep-all", "engine-prefill"],
)
def test_keep_all_reproduces_stock_mlx_lm(real, config):
    model, tokenizer = real
    prompt = tokenizer.encode(passkey_prompt(tokenizer, 160).text)
    assert_keep_all_reproduces_stock(model, prompt, config=config)


def test_keep_all_chat_reproduces_the_stock_chat(real):
    model, tokenizer = real
    replies = []
    for lazy in (None, LazyConfig()):
        session = ChatSession(model, tokenizer, lazy=lazy, max_tokens=10)
        replies.append(
            [
                [(r.token, r.logprobs) for r in session.send(message)]
                for message in ("Hi! Who are you?", "What is 2 + 2?", "Name a color.")
            ]
        )
    for stock, lazy in zip(*replies, strict=True):
        assert [t for t, _ in stock] == [t for t, _ in lazy]
        for (_, a), (_, b) in zip(stock, lazy, strict=True):
            assert mx.abs(a - b).max().item() < 1e-4


def test_gentle_keeps_the_passkey_answer_with_less_work(real):
    model, tokenizer = real
    # past gentle's 1,024-token floor, in one prefill chunk (3,072 tokens took CI 101 s, this 62)
    prompt = passkey_prompt(tokenizer, 2048, depth=0.5)
    baseline = lazymlx.generate(model, tokenizer, prompt.text, max_tokens=6)
    responses = list(
        lazymlx.stream_generate(model, tokenizer, prompt.text, max_tokens=6, lazy=PRESETS["gentle"])
    )
    assert prompt.correct(baseline)
    assert "".join(r.text for r in responses) == baseline
    stats = responses[-1].lazy
    assert stats.work_share < 0.87  # 67% of the layers whole, then ~1,130 of ~1,960 tokens
    assert stats.kv_rows_per_layer[-1] < stats.kv_rows_per_layer[0]  # pruning saved KV memory


@pytest.mark.parametrize("preset", ["default", "gentle"])
def test_everyday_prompts_under_a_pruning_preset_give_the_keep_all_answer(real, preset):
    """Prompts under min_prompt run whole, so short questions keep their answer: under the
    model's own default (a mass rule) and the built-in gentle rule."""
    model, tokenizer = real
    config = resolve_preset(preset, DEFAULT_MODEL) if preset == "default" else PRESETS[preset]
    assert config.prunes
    for prompt in ("The capital of France is", "What is 2+2? The answer is"):
        assert lazymlx.generate(
            model, tokenizer, prompt, max_tokens=12, lazy=config
        ) == lazymlx.generate(model, tokenizer, prompt, max_tokens=12)
    transcripts = []
    for lazy in (None, config):
        session = ChatSession(model, tokenizer, lazy=lazy, max_tokens=16)
        transcripts.append(
            [
                "".join(r.text for r in session.send(message))
                for message in ("What is the capital of France?", "And what is its population?")
            ]
        )
    assert transcripts[0] == transcripts[1]
