"""The LazyLLM engine on tiny random models: keep-all is stock mlx-lm, no (token, layer) pair is
computed twice, pruned tokens come back from their Aux slot, and masks follow original positions."""

from __future__ import annotations

import math
import os
import signal

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from conftest import assert_keep_all_reproduces_stock, engine_greedy, random_model, random_tokens
from hypothesis import given, settings
from hypothesis import strategies as st
from mlx_lm.models.cache import make_prompt_cache

import lazymlx
from lazymlx import LazyConfig, LazyState, engine
from lazymlx.config import SELECTIONS
from lazymlx.errors import LazymlxError
from lazymlx.session import ChatSession

AGGRESSIVE = LazyConfig(schedule=((0.2, 0.5), (0.4, 0.5), (0.6, 0.5)))


def quantized(model):
    nn.quantize(model, group_size=32, bits=4)
    return model


@pytest.mark.parametrize(
    "make_model",
    [
        lambda: random_model("llama"),
        lambda: random_model("mistral"),
        lambda: random_model("qwen2"),
        lambda: random_model("qwen3"),
        lambda: random_model("llama", tie_word_embeddings=False),
        lambda: quantized(random_model("llama")),
    ],
    ids=["llama", "mistral", "qwen2", "qwen3", "untied-head", "quantized-4bit"],
)
def test_keep_all_reproduces_stock_mlx_lm(make_model):
    model = make_model()
    prompt = random_tokens(150)
    assert_keep_all_reproduces_stock(model, prompt)


def test_keep_all_chat_reproduces_the_stock_chat(tiny):
    model, tokenizer = tiny
    transcripts = []
    for lazy in (None, LazyConfig()):
        session = ChatSession(model, tokenizer, system="be brief", lazy=lazy, max_tokens=12)
        turns = []
        for message in ("the cat sat", "on the mat", "and then?"):
            responses = list(session.send(message))
            turns.append(([r.token for r in responses], [r.logprobs for r in responses]))
        transcripts.append(turns)
    for (tokens, logprobs), (lazy_tokens, lazy_logprobs) in zip(*transcripts, strict=True):
        assert tokens == lazy_tokens
        for a, b in zip(logprobs, lazy_logprobs, strict=True):
            assert mx.abs(a - b).max().item() < 1e-4


def recount(state: LazyState) -> np.ndarray:
    """Brute force: how often each (token, layer) pair appears in the recorded computed sets."""
    counts = np.zeros_like(state.pair_count)
    for record in state.history:
        for layer, computed in enumerate(record.computed):
            np.add.at(counts[:, layer], computed, 1)
    return counts


def assert_depth_prefix(state: LazyState) -> None:
    """Each token's computed layers are exactly 0..depth-1, each once."""
    layers = np.arange(state.num_layers)[None, :]
    assert np.array_equal(state.pair_count, (layers < state.depth[:, None]).astype(np.int32))


@pytest.mark.parametrize("decode", ["lazy", "full"])
def test_each_pair_is_computed_at_most_once(decode):
    model = random_model(num_layers=8)
    config = LazyConfig(schedule=AGGRESSIVE.schedule, decode=decode)
    state = LazyState(model, record=True)
    prompt = random_tokens(200)
    engine_greedy(model, prompt, 64, config, state)
    assert state.pair_count.max() == 1
    assert np.array_equal(recount(state), state.pair_count)
    assert_depth_prefix(state)
    prefill = sum(np.sum(c < len(prompt)) for c in state.history[0].computed)
    assert prefill / (len(prompt) * 8) < 0.5
    cumulative = state.pair_count[: len(prompt)].sum() / (len(prompt) * 8)
    if decode == "full":
        assert cumulative == prefill / (len(prompt) * 8)  # full decode revives nothing


def test_stats_are_read_from_the_state(tiny):
    model, tokenizer = tiny
    prompt = random_tokens(120, vocab=200)
    state = LazyState(model, record=True)
    responses = list(
        lazymlx.stream_generate(
            model, tokenizer, prompt, max_tokens=16, lazy=AGGRESSIVE, prompt_cache=state
        )
    )
    stats, layers = responses[-1].lazy, state.num_layers
    prefill_pairs = state.history[0].pairs
    assert stats.prefill_fraction == prefill_pairs / (len(prompt) * layers)
    assert responses[0].lazy.cumulative_fraction == stats.prefill_fraction
    assert stats.cumulative_fraction == state.pair_count[: len(prompt)].sum() / (
        len(prompt) * layers
    )
    assert stats.max_pair_count == 1
    assert stats.kept_per_layer == tuple(state.last_step.present)
    adapter = state.adapter
    assert (
        stats.kv_bytes == layers * 2 * state.capacity * adapter.num_kv_heads * adapter.head_dim * 4
    )
    assert stats.aux_bytes == state.capacity * adapter.hidden_size * 4


def test_pruned_tokens_are_revived_from_their_aux_slot():
    model = random_model(num_layers=8)
    state = LazyState(model, record=True)
    prompt = random_tokens(200)
    engine_greedy(model, prompt, 64, AGGRESSIVE, state)
    revivals = 0
    depth = np.zeros(len(state.tokens), dtype=int)  # layers computed before each step
    for record in state.history:
        first_layer = {}
        for layer, computed in enumerate(record.computed):
            for position in computed:
                first_layer.setdefault(int(position), layer)
        for position, layer in first_layer.items():
            # a token resumes exactly at its depth: the layers below are never recomputed
            assert layer == depth[position]
            if layer > 0:
                revivals += position < len(prompt)
        for layer, computed in enumerate(record.computed):
            depth[computed] = np.maximum(depth[computed], layer + 1)
    assert revivals > 0


def test_revived_token_matches_the_full_model(monkeypatch):
    """Drop one token after layer 1 in prefill, bring it back at the next step, keeping all others.

    Nothing before it was ever pruned, so its Aux slot (layer-1 output) and its KV at the resumed
    layers must equal the full model's for it; tolerance 1e-5 (fp32, different reduction order).
    """
    model = random_model(num_layers=6)
    prompt, dropped = random_tokens(40), 17
    selections = []

    def top(scores, present, ratio, keep_first):
        selections.append(present)
        return present[present != dropped] if len(selections) == 1 else present

    monkeypatch.setattr(engine, "_top", top)
    state = LazyState(model)
    engine.step(state, prompt, {1: 0.5})
    assert state.depth[dropped] == 2 and state.depth[dropped + 1] == 6
    aux = state.aux[dropped]
    engine.step(state, [5], {1: 0.5})
    assert state.depth[dropped] == 6
    assert state.pair_count[dropped].tolist() == [1] * 6  # layers 0-1 were not recomputed

    cache = make_prompt_cache(model)
    h = model.model.embed_tokens(mx.array([prompt]))
    for layer, block in enumerate(model.layers):
        h = block(h, "causal", cache=cache[layer])
        if layer == 1:
            assert mx.allclose(aux, h[0, dropped], atol=1e-5)
    for layer in range(2, 6):
        assert mx.allclose(
            state.keys[layer][0, :, dropped], cache[layer].keys[0, :, dropped], atol=1e-5
        )
        assert mx.allclose(
            state.values[layer][0, :, dropped], cache[layer].values[0, :, dropped], atol=1e-5
        )


def materialized(mask, queries: np.ndarray, keys: np.ndarray) -> np.ndarray:
    if mask is None:
        return np.ones((len(queries), len(keys)), dtype=bool)
    if isinstance(mask, str):  # MLX's causal mask is aligned bottom-right
        return np.tril(np.ones((len(queries), len(keys)), dtype=bool), len(keys) - len(queries))
    return np.array(mask)


@given(st.sets(st.integers(0, 60), min_size=1), st.data())
def test_masks_follow_original_positions(key_set, data):
    keys = np.array(sorted(key_set))
    chosen = data.draw(st.lists(st.sampled_from(keys.tolist()), unique=True))
    queries = np.array(sorted(set(chosen) | {int(keys[-1])}))
    mask = materialized(engine._causal_mask(queries, keys), queries, keys)
    assert np.array_equal(mask, keys[None, :] <= queries[:, None])


PROPERTY_MODEL = None


@settings(max_examples=25, deadline=None)
@given(
    schedule=st.lists(st.tuples(st.floats(0, 0.99), st.floats(0.05, 1.0)), max_size=3),
    prompt_len=st.integers(1, 90),
    steps=st.integers(0, 6),
    decode=st.sampled_from(["lazy", "full"]),
    keep_first=st.integers(0, 4),
    turns=st.integers(1, 2),
    selection=st.sampled_from(SELECTIONS),
)
def test_random_schedules_keep_every_invariant(
    schedule, prompt_len, steps, decode, keep_first, turns, selection
):
    global PROPERTY_MODEL
    PROPERTY_MODEL = PROPERTY_MODEL or random_model(num_layers=5, seed=3)
    config = LazyConfig(
        schedule=tuple(schedule), keep_first=keep_first, decode=decode, selection=selection
    )
    keep = config.pruning_layers(5)
    state = LazyState(PROPERTY_MODEL, record=True)
    for turn in range(turns):
        prompt = random_tokens(prompt_len, seed=turn)
        tokens, logprobs = engine_greedy(PROPERTY_MODEL, prompt, steps, config, state)
        assert all(np.isfinite(np.array(lp)).all() for lp in logprobs)
    assert state.pair_count.max() <= 1
    assert np.array_equal(recount(state), state.pair_count)
    assert_depth_prefix(state)
    first = state.history[0]
    forced = min(keep_first, prompt_len - 1) + 1  # the sinks and the last token
    for layer, computed in enumerate(first.computed):
        assert computed[-1] == prompt_len - 1  # the last token goes through every layer
        assert np.all(np.diff(computed) > 0)
        if layer in keep and layer + 1 < len(first.present):
            n = first.present[layer]
            assert first.present[layer + 1] == min(n, max(math.ceil(keep[layer] * n), forced))
    assert state.pair_count[: min(keep_first, prompt_len)].all()  # sinks are never pruned
    assert all(
        np.all(np.diff(record.present) <= 0) for record in state.history
    )  # the set only shrinks with depth


def test_unsupported_architecture_is_a_clear_error():
    model = random_model()
    model.args.model_type = "gemma"
    with pytest.raises(LazymlxError, match="does not support model type 'gemma'; supported: llama"):
        LazyState(model)


@pytest.mark.parametrize("key", ["type", "rope_type"])
def test_dynamic_rope_is_a_clear_error(key):
    model = random_model()
    model.args.rope_scaling = {key: "dynamic", "factor": 2.0}
    with pytest.raises(LazymlxError, match="does not support dynamic NTK rope scaling"):
        LazyState(model)


def test_context_and_memory_limits_are_checked_before_any_work(tiny):
    model, tokenizer = tiny
    with pytest.raises(LazymlxError, match="handles at most 2048"):
        next(lazymlx.stream_generate(model, tokenizer, [5] * 2049, lazy=AGGRESSIVE))
    with pytest.raises(LazymlxError, match="more than this machine's"):
        LazyState(model).check_memory(10**7)


def test_cache_kind_must_match_the_path(tiny):
    model, tokenizer = tiny
    with pytest.raises(LazymlxError, match="a LazyState prompt_cache goes with lazy="):
        next(lazymlx.stream_generate(model, tokenizer, "the", prompt_cache=LazyState(model)))
    with pytest.raises(LazymlxError, match="batch size 1"):
        next(
            lazymlx.stream_generate(model, tokenizer, mx.zeros((2, 3), mx.uint32), lazy=AGGRESSIVE)
        )


def test_an_interrupted_step_leaves_the_state_as_it_was(monkeypatch):
    model = random_model(num_layers=6)
    prompt, turn = random_tokens(120), random_tokens(30, seed=1)
    keep = AGGRESSIVE.pruning_layers(6)
    reference = LazyState(model)
    engine.step(reference, prompt, keep)
    expected = engine.step(reference, turn, keep)

    state = LazyState(model)
    engine.step(state, prompt, keep)
    before = (list(state.tokens), state.depth.copy(), state.pair_count.copy())
    block, calls = engine._block, []

    def interrupted_block(*args):
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt  # Ctrl-C in the middle of the second step
        return block(*args)

    monkeypatch.setattr(engine, "_block", interrupted_block)
    with pytest.raises(KeyboardInterrupt):
        engine.step(state, turn, keep)
    monkeypatch.setattr(engine, "_block", block)
    assert state.tokens == before[0]
    assert np.array_equal(state.depth, before[1]) and np.array_equal(state.pair_count, before[2])
    assert mx.allclose(engine.step(state, turn, keep), expected, atol=1e-5)
    assert np.array_equal(state.pair_count, reference.pair_count)


def test_ctrl_c_during_the_commit_waits_for_it_to_finish(monkeypatch):
    model = random_model(num_layers=6)
    keep = AGGRESSIVE.pruning_layers(6)
    state, reference = LazyState(model), LazyState(model)
    for s in (state, reference):
        engine.step(s, random_tokens(80), keep)
    engine.step(reference, [7], keep)
    commit = LazyState.commit

    def interrupted_commit(self, *args):
        os.kill(os.getpid(), signal.SIGINT)  # arrives while the commit runs
        commit(self, *args)

    monkeypatch.setattr(LazyState, "commit", interrupted_commit)
    with pytest.raises(KeyboardInterrupt):
        engine.step(state, [7], keep)
    assert state.tokens == reference.tokens  # the step landed whole, then Ctrl-C was raised
    assert np.array_equal(state.depth, reference.depth)
    assert np.array_equal(state.pair_count, reference.pair_count)


@pytest.mark.parametrize("config", [LazyConfig(), AGGRESSIVE], ids=["off", "aggressive"])
def test_attention_in_query_chunks_changes_nothing(monkeypatch, config):
    model = random_model(num_layers=6)
    prompt, turn = random_tokens(150), random_tokens(60, seed=1)

    def two_turns():
        state = LazyState(model)
        first = engine.prompt_step(state, prompt, config)
        second = engine.prompt_step(state, turn, config)  # revived tokens join the queries
        return first, second, state.pair_count.copy()

    whole = two_turns()
    monkeypatch.setattr(engine, "QUERY_CHUNK", 16)
    chunked = two_turns()
    assert mx.allclose(whole[0], chunked[0], atol=1e-5)
    assert mx.allclose(whole[1], chunked[1], atol=1e-5)
    assert np.array_equal(whole[2], chunked[2])


def scored_calls(monkeypatch) -> list[np.ndarray]:
    """Records the attention scores each pruning layer computes."""
    calls = []
    original = engine._last_token_attention

    def recording(queries, keys, scale):
        scores = original(queries, keys, scale)
        calls.append(np.array(scores))
        return scores

    monkeypatch.setattr(engine, "_last_token_attention", recording)
    return calls


def test_static_selection_ranks_once_by_the_first_pruning_layer(monkeypatch):
    model = random_model(num_layers=8)
    calls = scored_calls(monkeypatch)
    state = LazyState(model, record=True)
    config = LazyConfig(schedule=AGGRESSIVE.schedule, selection="static", decode="full")
    engine_greedy(model, random_tokens(120), 4, config, state)
    assert len(calls) == 1  # one ranking for the prompt, none in full decode
    prefill = state.history[0]
    others = [p for p in np.argsort(-calls[0], kind="stable").tolist() if p != 119]
    for layer in (1, 3, 4):  # the pruning layers: floor(0.2·8), floor(0.4·8), floor(0.6·8)
        kept = prefill.computed[layer + 1].tolist()
        # the last token, then the best of the others by the first layer's scores
        assert set(kept) == {119, *others[: len(kept) - 1]}
    assert state.pair_count[:120].sum() == sum(np.sum(c < 120) for c in prefill.computed)
    assert state.pair_count.max() == 1


def test_random_selection_repeats_for_a_seed_and_differs_across_seeds(monkeypatch):
    model = random_model(num_layers=8)
    calls = scored_calls(monkeypatch)
    kept = []
    for seed in (0, 0, 1):
        state = LazyState(model, record=True)
        config = LazyConfig(schedule=AGGRESSIVE.schedule, selection="random", seed=seed)
        engine.prompt_step(state, random_tokens(120), config)
        kept.append([c.tolist() for c in state.history[0].computed])
    assert calls == []  # random selection never looks at attention
    assert kept[0] == kept[1] and kept[0] != kept[2]
    assert [len(c) for c in kept[0]] == [len(c) for c in kept[2]]  # same schedule, same sizes
