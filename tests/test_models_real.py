"""The registry's other real models at short lengths: Qwen2.5-Coder-0.5B-Instruct (qwen2, answers
through its chat template) and Gemma 3 270M (gemma3, a base model with sliding-window layers, run
raw). Each: pulled and converted (make test pulls them), keep-all equals stock mlx-lm, and the
default preset prunes and still answers."""

from __future__ import annotations

import pytest
from conftest import assert_keep_all_reproduces_stock

import lazymlx
from lazymlx import LazyConfig
from lazymlx.engine.presets import resolve_preset
from lazymlx.evals.cases import make_case
from lazymlx.prompts import passkey_prompt
from lazymlx.session import ChatSession

pytestmark = pytest.mark.real_model

QWEN, GEMMA = "qwen2.5-coder-0.5b", "gemma3-270m"


@pytest.fixture(scope="module")
def qwen():
    return lazymlx.load(QWEN)


@pytest.fixture(scope="module")
def gemma():
    return lazymlx.load(GEMMA)


def test_qwen_answers_through_its_chat_template(qwen):
    model, tokenizer = qwen
    session = ChatSession(model, tokenizer, max_tokens=24)
    reply = "".join(r.text for r in session.send("What is the capital of France? One word."))
    assert "Paris" in reply
    code = "".join(
        r.text for r in session.send("Write a Python expression for the sum of a list xs.")
    )
    assert "sum(xs)" in code


def test_gemma_continues_raw_text(gemma):
    model, tokenizer = gemma
    text = lazymlx.generate(model, tokenizer, "Paris is the capital of", max_tokens=4)
    assert "France" in text


@pytest.mark.parametrize("name", [QWEN, GEMMA])
def test_keep_all_reproduces_stock_mlx_lm(name, qwen, gemma):
    model, tokenizer = qwen if name == QWEN else gemma
    prompt = tokenizer.encode(passkey_prompt(tokenizer, 200).text)
    for config in (LazyConfig(), LazyConfig(schedule=((0.5, 0.999),))):
        assert_keep_all_reproduces_stock(model, prompt, steps=12, config=config)


@pytest.mark.parametrize(
    ("name", "preset", "tokens"),
    [(QWEN, "default", 1664), (QWEN, "fast", 600), (GEMMA, "default", 2048)],
)
def test_the_shipped_pruning_preset_keeps_the_passkey(name, preset, tokens, qwen, gemma):
    """Each default keeps by attention mass and prunes a prompt whose mass sits on a few percent
    of its tokens (at most 4% on Qwen, 3% on Gemma), from its gate on: prompts under 1,536
    tokens (Qwen) or 1,792 (Gemma) run whole. `fast` has no gate: a 600-token passkey prunes
    on Qwen. The bench times the defaults at 2k and 8k. Each length is past the window of
    Gemma's local layers."""
    model, tokenizer = qwen if name == QWEN else gemma
    assert resolve_preset("default", name).prunes  # its shipped one
    prompt = passkey_prompt(tokenizer, tokens, depth=0.3)
    stock = lazymlx.generate(model, tokenizer, prompt.text, max_tokens=6)
    responses = list(
        lazymlx.stream_generate(model, tokenizer, prompt.text, max_tokens=6, lazy=preset)
    )
    assert prompt.correct(stock)
    assert prompt.correct("".join(r.text for r in responses))
    assert responses[-1].lazy.work_share < 0.85


def test_a_short_document_summarized_under_the_default_is_stocks_summary(qwen):
    """Issue 53: a ~450-token document summarized through the chat looped under the default's
    ratios then (40-100 tokens left in the deep layers); the default now runs such a prompt
    whole (under its gate, and a summary's attention is spread)."""
    model, tokenizer = qwen
    case = make_case("summary", tokenizer, 512, 0, "validation")
    replies = []
    for lazy in (None, resolve_preset("default", QWEN)):
        session = ChatSession(model, tokenizer, lazy=lazy, max_tokens=24)
        replies.append("".join(r.text for r in session.send(case.segments[0])))
    assert replies[0] == replies[1]
