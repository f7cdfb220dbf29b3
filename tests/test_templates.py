"""A chat turn's scoring window observes the user's text, not the chat template's closing tokens."""

from __future__ import annotations

from dataclasses import replace

import mlx.core as mx

import lazymlx
from lazymlx.engine.cache import LazyState
from lazymlx.engine.config import LazyConfig
from lazymlx.engine.templates import generation_tail, template_tail

TEXT = " ".join(f"item {i} is {i * 7 % 97}." for i in range(60))
PRUNING = LazyConfig(schedule=((0.25, 0.5), (0.5, 0.5)), window=2, pool=1)


def chat_prompt(tokenizer, text: str = TEXT) -> list[int]:
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True
    )


def depths(tiny, prompt, config: LazyConfig) -> list[int]:
    model, tokenizer = tiny
    state = LazyState(model)
    lazymlx.generate(model, tokenizer, prompt, max_tokens=1, lazy=config, prompt_cache=state)
    return state.aux.depths().tolist()


def test_the_tail_is_what_the_template_renders_after_the_users_text(tiny):
    _, tokenizer = tiny
    tail = generation_tail(tokenizer)
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hello"}], add_generation_prompt=True, tokenize=False
    )
    assert tail and rendered.endswith(tokenizer.decode(list(tail)))
    assert template_tail(tokenizer, mx.array(chat_prompt(tokenizer))) == len(tail)
    assert template_tail(tokenizer, mx.array(tokenizer.encode(TEXT))) == 0  # a raw prompt


def test_a_chat_turn_observes_window_tokens_before_the_template(tiny):
    _, tokenizer = tiny
    prompt, tail = chat_prompt(tokenizer), len(generation_tail(tokenizer))
    past = depths(tiny, prompt, replace(PRUNING, past_template=True))
    assert past == depths(tiny, prompt, replace(PRUNING, window=PRUNING.window + tail))
    assert past != depths(tiny, prompt, PRUNING)  # the template alone ranked otherwise


def test_a_raw_prompt_is_scored_as_before(tiny):
    _, tokenizer = tiny
    prompt = tokenizer.encode(TEXT)
    assert depths(tiny, prompt, replace(PRUNING, past_template=True)) == depths(
        tiny, prompt, PRUNING
    )
