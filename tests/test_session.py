"""Chat sessions reuse the KV cache across turns and give the same answers as a fresh prefill."""

from __future__ import annotations

import json

import numpy as np
import pytest
from mlx_lm.models.cache import load_prompt_cache

import lazymlx
from lazymlx import LazyConfig, LazyState
from lazymlx.errors import LazymlxError
from lazymlx.session import ChatSession

PRUNING = LazyConfig(schedule=((0.25, 0.5), (0.5, 0.5)), decode="revive")


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
    assert second[-1].prompt_tokens == len(full)  # the whole prompt, as OpenAI counts it
    assert second[-1].cached_tokens > len(full) / 2  # but only the new turn was prefilled
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
    assert session.context.cache[0].offset == 0
    reply = list(session.send("the cat"))
    assert [r.token for r in reply] == fresh_answer(model, tokenizer, session.messages[:-1], 4)


def test_lazy_turns_extend_one_state_and_can_revive_earlier_turns(tiny):
    model, tokenizer = tiny
    session = ChatSession(model, tokenizer, lazy=PRUNING, max_tokens=4)
    list(session.send("the cat sat on the mat " * 8))
    first_turn = session.context.cache.offset
    depth_after_first = np.array(session.context.cache.aux.depths())
    assert (depth_after_first < session.context.cache.num_layers).any()  # some tokens were pruned
    second = list(session.send("where did the cat sit? " * 4))
    computed = second[-1].prompt_tokens - second[-1].cached_tokens
    assert computed < session.context.cache.offset - first_turn + 8  # only the new turn
    depth = np.array(session.context.cache.aux.depths())
    assert (depth[:first_turn] >= depth_after_first).all()  # KV is never deleted
    revived = depth[:first_turn] > depth_after_first
    assert revived.any()  # tokens pruned in turn 1 were computed again from their Aux slots


def test_lazy_reply_cut_short_and_clear(tiny):
    model, tokenizer = tiny
    session = ChatSession(model, tokenizer, lazy=PRUNING, max_tokens=8)
    stream = session.send("the cat")
    next(stream)
    stream.close()
    reply = list(session.send("in the"))
    assert reply[-1].lazy.work_share <= 1
    assert session.context.cache.offset <= len(session.context.tokens)
    assert session.context.cache.tokens == session.context.tokens[: session.context.cache.offset]
    session.clear()
    assert isinstance(session.context.cache, LazyState) and session.context.cache.offset == 0


def test_a_long_chat_drops_its_oldest_turns_and_stays_within_its_context(tiny):
    model, tokenizer = tiny
    session = ChatSession(model, tokenizer, system="be brief", max_context=120, max_tokens=4)
    for turn in range(12):
        replies = list(session.send(f"message number {turn} about cats"))
        assert replies  # every turn is answered
        assert session.context.cache[0].offset <= 120
    assert session.dropped_turns > 0
    assert session.messages[0] == {"role": "system", "content": "be brief"}
    assert session.messages[-2]["content"] == "message number 11 about cats"


def test_a_message_too_long_for_the_context_loses_no_earlier_turn(tiny):
    """Refused before any work: the turns the oversized message would have pushed out stay, and
    the kept context is not cut back for it."""
    model, tokenizer = tiny
    session = ChatSession(model, tokenizer, max_tokens=3)
    for message in ("the cat sat", "on the mat"):
        list(session.send(message))
    messages, tokens = list(session.messages), list(session.context.tokens)
    offset = session.context.cache[0].offset
    with pytest.raises(LazymlxError, match="needs .* tokens of context"):
        list(session.send("a long pasted document " * 2000))
    assert session.messages == messages and session.context.tokens == tokens
    assert session.context.cache[0].offset == offset
    assert list(session.send("and then?"))  # the chat goes on


def interrupt_when(stop):
    """A progress callback that raises KeyboardInterrupt (what Ctrl-C does) once `stop(done,
    total, call)` holds."""
    calls = []

    def progress(done: int, total: int) -> None:
        calls.append(done)
        if stop(done, total, len(calls)):
            raise KeyboardInterrupt

    return progress


class LayerInterrupt:
    """A model layer that raises KeyboardInterrupt on its `at`-th call: Ctrl-C landing while a
    stock forward pass is built, after the earlier layers took the chunk."""

    def __init__(self, layer, at: int) -> None:
        self.layer, self.at, self.calls = layer, at, 0

    def __getattr__(self, name: str):
        return getattr(self.layer, name)

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.calls == self.at:
            raise KeyboardInterrupt
        return self.layer(*args, **kwargs)


def rows_held(session: ChatSession) -> int:
    """The tokens every layer of the context holds (they must agree)."""
    cache = session.context.cache
    if session.context.lazy:
        assert {layer.offset for layer in cache.layers} == {cache.offset}
        assert cache.tokens == session.context.tokens  # the ids the rows were computed for
        return cache.offset
    (offset,) = {entry.offset for entry in cache}
    return offset


WHOLE = LazyConfig(schedule=PRUNING.schedule, min_prompt=4096)  # the model's own forward pass


@pytest.mark.parametrize(
    ("lazy", "where"),
    [
        (PRUNING, "layer"),  # the lazy prompt step, mid-way: it rolls back
        (WHOLE, "first token"),  # a decode step fed the first token, never returned
        (None, "chunk"),  # stock: the chunks done stay
        (None, "first token"),
        (None, "between layers"),
    ],
)
def test_an_interrupted_prompt_leaves_counts_files_and_rows_agreeing(
    tiny, tmp_path, capsys, lazy, where
):
    """Ctrl-C in a turn's prompt step: /status, a /save file's metadata, /load and the context's
    rows all report the same tokens, and the chat goes on."""
    from lazymlx.cli import chat as chat_module

    model, tokenizer = tiny
    session = ChatSession(model, tokenizer, lazy=lazy, max_tokens=3, prefill_step_size=16)
    files = chat_module.ChatFiles(session, "tiny", "off" if lazy is None else "test", None)
    list(session.send("the cat"))
    messages = list(session.messages)
    stops = {
        "layer": lambda done, total, call: call == 3,
        "chunk": lambda done, total, call: call == 4,
        "first token": lambda done, total, call: done == total,
        "between layers": lambda done, total, call: False,
    }
    layers = model.model.layers
    if where == "between layers":
        layers[2] = LayerInterrupt(layers[2], at=3)
    try:
        with pytest.raises(KeyboardInterrupt):
            list(session.send("a pasted document " * 40, on_progress=interrupt_when(stops[where])))
    finally:
        layers[2] = getattr(layers[2], "layer", layers[2])
    assert session.messages == messages  # the turn left no trace
    held = rows_held(session)
    assert held == len(session.context.tokens)
    capsys.readouterr()
    saved = tmp_path / "chat.safetensors"
    for command in ("/status", f"/save {saved}", f"/load {saved}"):
        chat_module.run_command(session, command, files)
    err = " ".join(capsys.readouterr().err.split())  # as rich wrapped it, unwrapped
    assert f"1 turn, {held} tokens in context" in err
    assert f"loaded {saved}: 1 turn, {held} tokens" in err
    _, metadata = load_prompt_cache(str(saved), return_metadata=True)
    assert len(json.loads(metadata["tokens"])) == held == rows_held(session)
    assert list(session.send("and then?"))  # the chat goes on
