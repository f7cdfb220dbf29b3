"""Baseline generation: mlx-lm's tokens, with TTFT and stats on every response."""

from __future__ import annotations

import re
import time
from dataclasses import fields
from pathlib import Path

import mlx.core as mx
import pytest
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import make_prompt_cache

import lazymlx
from lazymlx.errors import LazymlxError
from lazymlx.generation import LazyStats, Response


def test_stream_generate_yields_responses_with_ttft(tiny):
    model, tokenizer = tiny
    responses = list(lazymlx.stream_generate(model, tokenizer, "the cat sat", max_tokens=8))
    assert 1 <= len(responses) <= 8
    last = responses[-1]
    assert isinstance(last, Response)
    assert last.finish_reason in ("stop", "length")
    assert last.prompt_tokens == len(tokenizer.encode("the cat sat"))
    assert all(r.ttft_s == responses[0].ttft_s > 0 for r in responses)
    assert last.peak_memory > 0 and last.generation_tps > 0


def test_ttft_counts_from_the_arrival_an_app_gives(tiny):
    """An app that queued the request itself passes when it arrived: ttft_s then counts the wait,
    queued_s says how much of it was waiting; a plain call waited for nothing."""
    model, tokenizer = tiny
    plain = next(lazymlx.stream_generate(model, tokenizer, "the cat sat", max_tokens=2))
    assert 0 <= plain.queued_s < 0.05 and plain.ttft_s > plain.queued_s
    arrived = time.perf_counter() - 1.0  # a second in the app's own queue
    first = next(
        lazymlx.stream_generate(model, tokenizer, "the cat sat", max_tokens=2, arrived=arrived)
    )
    assert 1.0 <= first.queued_s < first.ttft_s


def test_greedy_tokens_equal_mlx_lm(tiny):
    model, tokenizer = tiny
    prompt = tokenizer.encode("in the beginning")
    ours = [r.token for r in lazymlx.stream_generate(model, tokenizer, prompt, max_tokens=16)]
    theirs = [t for t, _ in generate_step(mx.array(prompt), model, max_tokens=16)]
    eos = tokenizer.eos_token_ids
    expected = theirs[: next((i + 1 for i, t in enumerate(theirs) if t in eos), len(theirs))]
    assert ours == expected


def test_generate_returns_the_streamed_text(tiny):
    model, tokenizer = tiny
    text = lazymlx.generate(model, tokenizer, "the", max_tokens=6)
    streamed = "".join(
        r.text for r in lazymlx.stream_generate(model, tokenizer, "the", max_tokens=6)
    )
    assert text == streamed


def test_sampling_with_temperature_is_seeded(tiny):
    model, tokenizer = tiny
    runs = []
    for _ in range(2):
        mx.random.seed(7)
        runs.append(lazymlx.generate(model, tokenizer, "the", max_tokens=6, temp=1.0, top_p=0.9))
    assert runs[0] == runs[1]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prompt": "", "max_tokens": 4}, "the prompt is empty"),
        ({"prompt": "hi", "max_tokens": 0}, "max_tokens takes a whole number >= 1; got 0"),
        ({"prompt": "hi", "temp": -1.0}, "temp takes a number >= 0"),
        ({"prompt": "hi", "top_p": 0.0}, "top_p takes a number above 0, at most 1"),
        ({"prompt": mx.zeros((2, 3), dtype=mx.uint32)}, "batch size 1"),
        ({"prompt": [5] * 2049}, "needs 2049 tokens of context but the model handles at most 2048"),
    ],
)
def test_bad_arguments_are_clear_errors(tiny, kwargs, message):
    model, tokenizer = tiny
    with pytest.raises(LazymlxError, match=message):
        lazymlx.generate(model, tokenizer, **kwargs)


@pytest.mark.real_model
def test_real_model_knows_the_capital_of_france(real):
    model, tokenizer = real
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}], add_generation_prompt=True
    )
    assert "Paris" in lazymlx.generate(model, tokenizer, prompt, max_tokens=24)


@pytest.mark.parametrize(
    "lazy", [None, lazymlx.LazyConfig(schedule=((0.5, 0.5),))], ids=["stock", "lazy"]
)
def test_prompt_progress_reports_0_first_then_climbs_to_the_whole_prompt(tiny, lazy):
    """mlx-lm's convention on both paths: 0 done as the prompt step starts (the lazy step then
    reports per layer, stock mlx-lm per prefill chunk)."""
    model, tokenizer = tiny
    seen: list[tuple[int, int]] = []
    lazymlx.generate(
        model,
        tokenizer,
        "the cat sat on the mat " * 10,
        max_tokens=2,
        lazy=lazy,
        prompt_progress_callback=lambda done, total: seen.append((done, total)),
    )
    total = seen[0][1]
    assert seen[0] == (0, total) and seen[-1] == (total, total) and len(seen) >= 3
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)


def test_prompt_tokens_count_the_cached_ones_too(tiny):
    """One meaning everywhere (the CLI, the LLM, the server): the whole prompt, with the
    cached part beside it; prompt_tps counts the tokens computed."""
    model, tokenizer = tiny
    cache = make_prompt_cache(model)
    list(lazymlx.stream_generate(model, tokenizer, "the cat sat", max_tokens=1, prompt_cache=cache))
    held, more = cache[0].offset, tokenizer.encode(" on the mat")
    *_, last = lazymlx.stream_generate(model, tokenizer, more, max_tokens=2, prompt_cache=cache)
    assert last.cached_tokens == held > 0 and last.prompt_tokens == held + len(more)


USAGE = Path(__file__).resolve().parents[1] / "docs" / "usage.md"


def test_usage_lists_only_real_fields_of_response_lazy():
    """usage.md listed `complete` (a LazyConfig field) among `Response.lazy`'s, which raised
    AttributeError."""
    text = " ".join(USAGE.read_text().split())
    listed = text.split("Every lazy response carries `lazy`, read from the context:", 1)[1]
    listed = listed.split("Supported families", 1)[0]
    names = set(re.findall(r"`([a-z_]+)`", listed))
    assert names and names <= {field.name for field in fields(LazyStats)}


def test_a_lazy_state_takes_the_conversation_after_its_offset(tiny):
    """usage.md's multi-turn recipe: the state holds `state.offset` tokens (the first prompt,
    then every token generated), so the next call passes the conversation after them, and
    answers as the whole conversation computed at once does."""
    model, tokenizer = tiny
    assert "conversation_tokens[state.offset :]" in USAGE.read_text()  # as ruff formats it
    messages = [{"role": "user", "content": "the cat"}]
    turn_1 = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    state = lazymlx.LazyState(model)
    answer = [
        r.token
        for r in lazymlx.stream_generate(
            model, tokenizer, turn_1, max_tokens=5, lazy="gentle", prompt_cache=state
        )
    ]
    assert state.offset == len(turn_1) + len(answer)
    messages += [
        {"role": "assistant", "content": tokenizer.decode(answer)},
        {"role": "user", "content": "and the dog"},
    ]
    conversation = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    assert conversation[: state.offset] == turn_1 + answer
    kept = lazymlx.generate(
        model,
        tokenizer,
        conversation[state.offset :],
        max_tokens=5,
        lazy="gentle",
        prompt_cache=state,
    )
    assert kept == lazymlx.generate(model, tokenizer, conversation, max_tokens=5, lazy="gentle")
