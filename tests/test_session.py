"""Chat sessions reuse the KV cache across turns and give the same answers as a fresh prefill."""

from __future__ import annotations

import lazymlx
from lazymlx.session import ChatSession


def fresh_answer(model, tokenizer, messages, max_tokens):
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    return [r.token for r in lazymlx.stream_generate(model, tokenizer, prompt, max_tokens)]


def test_turns_prefill_only_new_tokens_and_match_a_fresh_prefill(tiny):
    model, tokenizer = tiny
    session = ChatSession(model, tokenizer, system="be brief", max_tokens=6)
    first = list(session.send("the cat"))
    assert first[-1].prompt_tokens == len(
        tokenizer.apply_chat_template(session.messages[:2], add_generation_prompt=True)
    )
    history = list(session.messages)
    second = list(session.send("and the dog"))
    full = tokenizer.apply_chat_template(
        history + [{"role": "user", "content": "and the dog"}], add_generation_prompt=True
    )
    assert second[-1].prompt_tokens < len(full) / 2  # only the new turn was prefilled
    expected = fresh_answer(model, tokenizer, session.messages[:-1], 6)
    assert [r.token for r in second] == expected
    assert session.messages[-1]["role"] == "assistant"


def test_a_reply_cut_short_is_kept_and_the_next_turn_is_still_right(tiny):
    model, tokenizer = tiny
    session = ChatSession(model, tokenizer, max_tokens=8)
    stream = session.send("the cat")
    next(stream)
    stream.close()  # what Ctrl-C does to the reply
    assert session.messages[-1]["role"] == "assistant"
    reply = list(session.send("in the"))
    assert [r.token for r in reply] == fresh_answer(model, tokenizer, session.messages[:-1], 8)


def test_clear_forgets_the_conversation_but_keeps_the_system_prompt(tiny):
    model, tokenizer = tiny
    session = ChatSession(model, tokenizer, system="be brief", max_tokens=4)
    list(session.send("the cat"))
    session.clear()
    assert session.messages == [{"role": "system", "content": "be brief"}]
    assert session.cache[0].offset == 0
    reply = list(session.send("the cat"))
    assert [r.token for r in reply] == fresh_answer(model, tokenizer, session.messages[:-1], 4)
