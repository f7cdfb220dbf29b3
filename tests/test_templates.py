"""A chat turn's scoring window observes the user's text, not the chat template's closing
tokens; the question a prompt ends with is found after its last blank line or message start."""

from __future__ import annotations

from dataclasses import replace

import mlx.core as mx
from conftest import constants

import lazymlx
from lazymlx.engine.cache import LazyState
from lazymlx.engine.config import WINDOW, LazyConfig
from lazymlx.engine.prefill import ranking_queries
from lazymlx.engine.templates import (
    QUESTION_MOST,
    generation_tail,
    question_length,
    template_tail,
)

TEXT = " ".join(f"item {i} is {i * 7 % 97}." for i in range(60))
PRUNING = LazyConfig(schedule=((0.25, 0.5), (0.5, 0.5)))


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
    """The tail is observed beside the window's tokens: a chat turn ranks by its question's
    last words, not by the template alone (LazyLLM's last-token rule, `paper`, does not)."""
    _, tokenizer = tiny
    prompt, tail = chat_prompt(tokenizer), len(generation_tail(tokenizer))
    assert ranking_queries(PRUNING, tail) == WINDOW + tail
    paper = replace(PRUNING, selection="paper")
    assert ranking_queries(paper, tail) == 1
    with constants(WINDOW=2, POOL=1):
        assert depths(tiny, prompt, PRUNING) != depths(tiny, prompt, paper)


def test_a_raw_prompt_is_scored_by_its_last_window_tokens(tiny):
    _, tokenizer = tiny
    prompt = mx.array(tokenizer.encode(TEXT))
    assert template_tail(tokenizer, prompt) == 0
    assert ranking_queries(PRUNING, 0) == WINDOW


def test_the_question_is_what_follows_the_last_blank_line_or_message_start(tiny):
    _, tokenizer = tiny
    question = "Which item is 21?"
    asked = len(tokenizer.encode(question, add_special_tokens=False))
    prompt = mx.array(chat_prompt(tokenizer, f"{TEXT}\n\n{question}"))
    tail = template_tail(tokenizer, prompt)
    assert question_length(tokenizer, prompt, tail) == asked
    # a chat message without a blank line: the message is the question
    prompt = mx.array(chat_prompt(tokenizer, question))
    assert question_length(tokenizer, prompt, template_tail(tokenizer, prompt)) == asked
    # a raw prompt that runs on has none; a question longer than QUESTION_MOST is read by its end
    assert question_length(tokenizer, mx.array(tokenizer.encode(TEXT)), 0) == 0
    long = mx.array(tokenizer.encode("Intro.\n\n" + TEXT))
    assert long.size > QUESTION_MOST and question_length(tokenizer, long, 0) == 0
