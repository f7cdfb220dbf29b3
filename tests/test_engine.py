"""The LazyLLM engine on tiny random models: keep-all is stock mlx-lm, no (token, layer) pair is
computed twice, pruned tokens come back from their Aux slot with the full model's KV, a context
survives Ctrl-C, trimming, saving and loading."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from conftest import (
    assert_keep_all_reproduces_stock,
    constants,
    engine_greedy,
    random_model,
    random_tokens,
    stock_greedy,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from mlx_lm.models.cache import load_prompt_cache, make_prompt_cache, trim_prompt_cache

import lazymlx
from lazymlx import LazyConfig, LazyState
from lazymlx.contexts import Context, load_context, save_context
from lazymlx.engine import blocks, policy, prefill
from lazymlx.engine import config as engine_config
from lazymlx.engine.cache import LazyKVCache
from lazymlx.engine.config import SELECTIONS
from lazymlx.errors import LazymlxError
from lazymlx.session import ChatSession

AGGRESSIVE = LazyConfig(schedule=((0.2, 0.5), (0.4, 0.5), (0.6, 0.5)))
REVIVING = LazyConfig(schedule=AGGRESSIVE.schedule, decode="revive")


@pytest.fixture(autouse=True)
def revive_at_the_tiny_models_scale(monkeypatch):
    """Revival brings back 4 tokens a layer a step here (REVIVE, 16 at scale), so a
    reviving decode of a tiny model's short prompt still leaves some tokens pruned."""
    monkeypatch.setattr(engine_config, "REVIVE", 4)


# prunes by configuration but keeps every token of a 150-token prompt: ceil(0.999 · 150) = 150,
# so the prompt goes through the engine's own layer-major prefill, not the model's forward pass
ENGINE_KEEP_ALL = LazyConfig(schedule=((0.5, 0.999),))
# a floor above the prompt's length keeps every token at a hard schedule
FLOORED = LazyConfig(schedule=((0.3, 0.1), (0.6, 0.1)), min_keep=512)
# a mass rule holding all of the attention keeps every token, through the engine's own prefill
MASS_KEEP_ALL = LazyConfig(schedule=((0.3, 1.0), (0.6, 0.9999)), mass=1.0)


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
        lambda: random_model("gemma3_text"),
        lambda: random_model("llama", tie_word_embeddings=False),
        lambda: quantized(random_model("llama")),
    ],
    ids=["llama", "mistral", "qwen2", "qwen3", "gemma3", "untied-head", "quantized-4bit"],
)
@pytest.mark.parametrize(
    "config",
    [LazyConfig(), ENGINE_KEEP_ALL, FLOORED, MASS_KEEP_ALL],
    ids=["keep-all", "engine-prefill", "floor", "mass-1"],
)
@pytest.mark.parametrize("chunk", [2048, 32])
def test_keep_all_reproduces_stock_mlx_lm(make_model, config, chunk):
    assert_keep_all_reproduces_stock(make_model(), random_tokens(150), config=config, chunk=chunk)


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


def pair_counts(state: LazyState) -> np.ndarray:
    """Brute force from the recorded computations: how often each (token, layer) was computed."""
    counts = np.zeros((state.offset, state.num_layers), dtype=np.int32)
    for layer, positions in state.record:
        np.add.at(counts[:, layer], positions, 1)
    return counts


def assert_each_pair_once_and_depths_agree(state: LazyState) -> None:
    """Each token's computed layers are exactly 0..depth-1, each once, and the caches hold
    exactly those rows."""
    counts = pair_counts(state)
    depth = np.array(state.aux.depths())
    layers = np.arange(state.num_layers)[None, :]
    assert np.array_equal(counts, (layers < depth[:, None]).astype(np.int32))
    for layer, cache in enumerate(state.layers):
        rows = np.array(cache.row_positions())
        assert sorted(rows.tolist()) == np.flatnonzero(depth > layer).tolist()
        assert cache.offset == state.offset
    assert state.pairs() == counts.sum()


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
@pytest.mark.parametrize("config", [AGGRESSIVE, REVIVING], ids=["sparse", "revive"])
def test_each_pair_is_computed_at_most_once(config, family):
    model = random_model(family, num_layers=8)
    state = LazyState(model)
    state.record = []
    prompt = random_tokens(200)
    engine_greedy(model, prompt, 64, config, state)
    assert_each_pair_once_and_depths_agree(state)
    prefill_pairs = sum(
        np.sum(np.array(p) < len(prompt)) for _, p in state.record[: state.num_layers]
    )
    share = prefill_pairs / (len(prompt) * 8)
    if family == "gemma3_text":  # pruned at its global layers 2 and 5: 3·200 + 3·50 + 2·25 pairs
        assert share == 0.5
    else:
        assert share < 0.5
    prompt_pairs = state.pairs(0, len(prompt))
    if config.decode == "sparse":
        assert prompt_pairs == prefill_pairs  # nothing revived
    else:
        assert prompt_pairs > prefill_pairs  # decode brought pruned prompt tokens back


def test_stats_are_read_from_the_state(tiny):
    model, tokenizer = tiny
    prompt = random_tokens(120, vocab=200)
    state = LazyState(model)
    state.record = []
    responses = list(
        lazymlx.stream_generate(
            model, tokenizer, prompt, max_tokens=16, lazy=REVIVING, prompt_cache=state
        )
    )
    layers = state.num_layers
    prefill_pairs = sum(len(p) for _, p in state.record[:layers])
    stats = responses[-1].lazy
    assert stats.step_share == prefill_pairs / (len(prompt) * layers)
    assert stats.kv_rows_per_layer == tuple(cache.rows for cache in state.layers)
    assert stats.kv_rows_per_layer[0] == state.offset > stats.kv_rows_per_layer[-1]
    assert stats.kv_bytes == state.kv_bytes > 0 and stats.aux_bytes == state.aux_bytes > 0


def test_pruned_tokens_come_back_from_their_aux_slot_with_the_full_models_kv(monkeypatch):
    """Drop one token after layer 1 in the prompt step; the next step (a one-token prompt, then a
    reviving decode step) must bring it back, resuming at layer 2 from its Aux slot (the layer-1
    output), with layers 0-1 never recomputed. Nothing before it was pruned, so its Aux slot and its KV at layers 2-5 equal the
    full model's; tolerance 1e-5 (fp32, different reduction order)."""
    model = random_model(num_layers=6)
    prompt, dropped = random_tokens(40), 17
    original = prefill.Ranker.own

    def lowest_for_dropped(self, layer, rows, count):
        scores = original(self, layer, rows, count)
        return mx.where(mx.arange(count) == dropped, -1.0, scores)

    monkeypatch.setattr(prefill.Ranker, "own", lowest_for_dropped)
    config = LazyConfig(schedule=((1 / 6, 39 / 40),), decode="revive")
    state = LazyState(model)
    state.record = []
    engine_greedy(model, prompt, 0, config, state)
    depth = np.array(state.aux.depths())
    assert depth[dropped] == 2 and (np.delete(depth, dropped) == 6).all()
    aux = state.aux.hidden[dropped]

    engine_greedy(model, [5], 2, config, state)  # a one-token prompt, then a decode step
    assert np.array(state.aux.depths())[dropped] == 6
    assert_each_pair_once_and_depths_agree(state)

    cache = make_prompt_cache(model)
    h = model.model.embed_tokens(mx.array([prompt]))
    for layer, block in enumerate(model.layers):
        h = block(h, "causal", cache=cache[layer])
        if layer == 1:
            assert mx.allclose(aux, h[0, dropped], atol=1e-5)
    for layer in range(2, 6):
        ours = state[layer]
        row = np.array(ours.row_positions()).tolist().index(dropped)
        keys, values = ours.fetch()
        assert mx.allclose(keys[0, :, row], cache[layer].keys[0, :, dropped], atol=1e-5)
        assert mx.allclose(values[0, :, row], cache[layer].values[0, :, dropped], atol=1e-5)


def test_a_later_prompt_step_revives_what_its_attention_picks_with_the_full_models_kv(
    monkeypatch,
):
    """A document step drops one token after layer 1; a later short question that attends most
    to it brings it back in its own prompt step (not in decode: decode never revives here),
    resuming at layer 2 from its Aux slot with the full model's KV at every deeper layer, each
    (token, layer) pair computed once."""
    model = random_model(num_layers=6)
    document, dropped = random_tokens(40), 17
    original_own, original_rows = prefill.Ranker.own, prefill.Ranker.row_probs

    def lowest_for_dropped(self, layer, rows, count):
        scores = original_own(self, layer, rows, count)
        return mx.where(mx.arange(count) == dropped, -1.0, scores)

    config = LazyConfig(schedule=((1 / 6, 39 / 40),), min_prompt=10, decode="sparse")
    state = LazyState(model)
    state.record = []
    monkeypatch.setattr(prefill.Ranker, "own", lowest_for_dropped)
    engine_greedy(model, document, 0, config, state)
    assert np.array(state.aux.depths())[dropped] == 2

    def highest_for_dropped(self, observed, cache, scale):
        probs = original_rows(self, observed, cache, scale)
        return mx.where(cache.row_positions() == dropped, 1.0, probs)

    monkeypatch.setattr(prefill.Ranker, "own", original_own)
    monkeypatch.setattr(prefill.Ranker, "row_probs", highest_for_dropped)
    engine_greedy(model, random_tokens(3, seed=4), 0, config, state)  # short: runs whole
    assert np.array(state.aux.depths())[dropped] == 6
    assert_each_pair_once_and_depths_agree(state)
    cache = make_prompt_cache(model)
    h = model.model.embed_tokens(mx.array([document]))
    for block, layer_cache in zip(model.layers, cache, strict=True):
        h = block(h, "causal", cache=layer_cache)
    for layer in range(2, 6):
        ours = state[layer]
        row = np.array(ours.row_positions()).tolist().index(dropped)
        keys, values = ours.fetch()
        assert mx.allclose(keys[0, :, row], cache[layer].keys[0, :, dropped], atol=1e-5)
        assert mx.allclose(values[0, :, row], cache[layer].values[0, :, dropped], atol=1e-5)


def test_an_interrupted_reviving_step_leaves_the_context_as_it_was(monkeypatch):
    model = random_model(num_layers=6)
    config = LazyConfig(schedule=((0.2, 0.5), (0.5, 0.5)), min_prompt=10)
    state = LazyState(model)
    engine_greedy(model, random_tokens(60), 0, config, state)
    before = (np.array(state.aux.depths()), np.array(state.aux.hidden[:60]))
    rows = [cache.rows for cache in state.layers]

    def stop_at_layer_4(done, total):
        if done >= total * 4 // 6:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        prefill.prompt_step(
            state, mx.array(random_tokens(5, seed=2)), config, progress=stop_at_layer_4, prune=False
        )
    assert np.array_equal(np.array(state.aux.depths()), before[0])
    assert np.array_equal(np.array(state.aux.hidden[:60]), before[1])
    assert [cache.rows for cache in state.layers] == rows and state.offset == 60
    prefill.prompt_step(state, mx.array(random_tokens(5, seed=2)), config, prune=False)
    assert (np.array(state.aux.depths())[:60] > before[0]).any()  # it had revived some


@given(st.lists(st.integers(0, 60), min_size=0, max_size=40, unique=True), st.integers(1, 6))
def test_explicit_masks_follow_original_positions(cached, new):
    cache = LazyKVCache()
    if cached:
        rows = mx.array(cached, dtype=mx.int32)
        cache.append(mx.zeros((1, 1, len(cached), 4)), mx.zeros((1, 1, len(cached), 4)), rows)
    cache.ends_at(max(cached, default=-1) + 1)
    queries = np.arange(cache.offset, cache.offset + new)
    keys = np.array(cached + queries.tolist())
    mask = np.array(cache.make_mask(new, return_array=True))
    assert np.array_equal(mask, keys[None, :] <= queries[:, None])
    # every cached row precedes the new tokens, so MLX's bottom-right "causal" mask is the same
    causal = np.tril(np.ones((new, len(keys)), dtype=bool), len(keys) - new)
    assert np.array_equal(mask, causal)
    assert cache.make_mask(new) == ("causal" if new > 1 else None)


PROPERTY_MODEL = None


@settings(max_examples=25, deadline=None)
@given(
    schedule=st.lists(st.tuples(st.floats(0, 0.99), st.floats(0.05, 1.0)), max_size=3),
    prompt_len=st.integers(1, 90),
    steps=st.integers(0, 6),
    decode=st.sampled_from(["sparse", "revive"]),
    revive=st.integers(0, 5),
    keep_first=st.integers(0, 4),
    turns=st.integers(1, 2),
    selection=st.sampled_from(SELECTIONS),
    chunk=st.sampled_from([7, 2048]),
    scoring=st.tuples(st.integers(1, 12), st.integers(0, 2)),
    min_keep=st.sampled_from([0, 5, 40]),
    mass=st.sampled_from([0.0, 0.0, 0.5, 0.9, 1.0]),
    least=st.sampled_from([0.0, 0.1]),
    dense=st.sampled_from([1.0, 0.5]),
)
def test_random_schedules_keep_every_invariant(
    schedule,
    prompt_len,
    steps,
    decode,
    revive,
    keep_first,
    turns,
    selection,
    chunk,
    scoring,
    min_keep,
    mass,
    least,
    dense,
):
    global PROPERTY_MODEL
    PROPERTY_MODEL = PROPERTY_MODEL or random_model(num_layers=5, seed=3)
    config = LazyConfig(
        schedule=tuple(schedule),
        decode=decode,
        selection=selection,
        min_keep=min_keep,
        mass=mass,
        least=least,
        dense=dense,
    )
    with constants(KEEP_FIRST=keep_first, REVIVE=revive, WINDOW=scoring[0], POOL=scoring[1]):
        _check_invariants(config, prompt_len, steps, turns, chunk, keep_first)


def _check_invariants(config, prompt_len, steps, turns, chunk, keep_first):
    keep = config.pruning_layers(5)
    state = LazyState(PROPERTY_MODEL)
    state.record = []
    for turn in range(turns):
        prompt = random_tokens(prompt_len, seed=turn)
        _, logprobs = engine_greedy(PROPERTY_MODEL, prompt, steps, config, state, chunk=chunk)
        assert all(np.isfinite(np.array(lp)).all() for lp in logprobs)
    assert_each_pair_once_and_depths_agree(state)
    if not config.prunes:  # mlx-lm's own prefill ran the prompt: it keeps everything
        assert (np.array(state.aux.depths()) == 5).all()
        return
    first = [positions for _, positions in state.record[:5]]  # the lazy prompt step, layer-major
    forced = min(keep_first, prompt_len) + 1  # the sinks and the last token
    for layer, computed in enumerate(first):
        assert computed[-1] == prompt_len - 1  # the last token goes through every layer
        assert np.all(np.diff(computed) > 0)
        if layer + 1 < 5:
            n = len(computed)
            low, high = config.kept_bounds(keep[layer], n) if layer in keep else (n, n)
            went_on = len(first[layer + 1])
            assert min(n, max(low, forced)) <= went_on <= min(n, max(high, forced)) or (
                went_on == n and config.dense < 1  # spread attention: whole from there
            )
            if not 0 < config.mass < 1:  # a fixed ratio, or a mass rule keeping up to its ceiling
                assert went_on == min(n, max(high, forced))
    depth = np.array(state.aux.depths())
    assert (depth[: min(keep_first, prompt_len)] == 5).all()  # sinks are never pruned


def test_a_mass_rule_prunes_a_real_prompt_step_between_its_bounds():
    model = random_model(num_layers=6, seed=5)
    config = LazyConfig(schedule=((0.34, 1.0), (0.67, 0.6)), mass=0.6, least=0.1)
    state = LazyState(model)
    state.record = []
    prompt = random_tokens(300)
    engine_greedy(model, prompt, 4, config, state)
    assert_each_pair_once_and_depths_agree(state)
    carried = [len(positions) for _, positions in state.record[:6]]
    assert carried[0] == 300
    assert 30 <= carried[3] < 300  # layer 2 kept what held 60% of the attention, >= 10%
    assert carried[5] <= int(np.ceil(0.6 * carried[3]))  # the ceiling at layer 4
    assert "60% of the attention" in config.describe()


def test_a_spread_prompt_runs_whole_from_the_layer_that_says_so(monkeypatch):
    """A mass rule with dense: where the attention's mass needs more than that share of the
    prompt, every token goes on there and past every later pruning layer (stock's keys)."""
    model = random_model(num_layers=6, seed=5)
    spread = LazyConfig(schedule=((0.34, 1.0), (0.67, 0.5)), mass=0.9, dense=0.01)
    state = LazyState(model)
    state.record = []
    prompt = random_tokens(300)
    engine_greedy(model, prompt, 4, spread, state)
    assert [len(p) for _, p in state.record[:6]] == [300] * 6
    assert (np.array(state.aux.depths()) == 6).all()
    sharp = LazyConfig(schedule=spread.schedule, mass=0.9, dense=0.999)
    state = LazyState(model)
    state.record = []
    engine_greedy(model, prompt, 4, sharp, state)
    assert len(state.record[3][1]) < 300  # the same mass, under its dense share: pruned


def test_the_first_cut_falls_where_the_question_points_and_keeps_that_place(monkeypatch):
    """With `point`, the first cut waits for the window to point at one place in the text: it
    falls at the first candidate layer where it does, keeps that place and its neighbours
    whatever their scores, and a step that points nowhere by the last candidate runs whole."""
    model = random_model(num_layers=6, seed=5)
    monkeypatch.setattr(engine_config, "KEEP_FIRST", 2)
    monkeypatch.setattr(engine_config, "WINDOW", 4)
    config = LazyConfig(schedule=((0.17, 1.0), (0.67, 1.0)), mass=0.5, least=0.1, point=0.5)
    assert LazyState(model).first_cuts(config) == [1, 2, 3]
    prompt, place = random_tokens(300), 100

    def run(sharp_at: int | None) -> list[list[int]]:
        calls = []

        def peak(probs):
            calls.append(None)
            flat = mx.full((probs.shape[2], probs.shape[3]), 1.0 / probs.shape[3])
            if len(calls) - 1 == sharp_at:  # the candidate layers in turn: 1, 2, 3
                flat[0, place] = 0.9
                flat[1, place + 1] = 0.9
                flat[2, place + 2] = 0.9
            return flat

        monkeypatch.setattr(prefill, "attention_peak", peak)
        state = LazyState(model)
        state.record = []
        engine_greedy(model, prompt, 2, config, state)
        assert_each_pair_once_and_depths_agree(state)
        return [positions for _, positions in state.record[:6]]

    carried = run(sharp_at=1)  # layer 2 points at the place
    assert [len(p) for p in carried[:3]] == [300] * 3 and len(carried[3]) < 300
    near = set(range(place - policy.AROUND, place + 2 + policy.AROUND + 1))
    assert near <= set(carried[3])  # the place and its neighbours, whatever their scores
    assert [len(p) for p in run(sharp_at=None)] == [300] * 6  # it points nowhere: whole
    assert len(run(sharp_at=0)[2]) < 300  # it points at once: the first candidate cuts


def test_mass_and_least_must_be_shares():
    for field in ("mass", "least", "dense"):
        for bad in (-0.1, 1.5, True, "0.9"):
            with pytest.raises(LazymlxError, match=field):
                LazyConfig(schedule=((0.5, 1.0),), **{field: bad})
    assert not LazyConfig(schedule=((0.5, 1.0),), mass=1.0).prunes  # holds everything
    assert LazyConfig(schedule=((0.5, 1.0),), mass=0.9).prunes


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


def test_cache_kind_and_options_must_match_the_path(tiny):
    model, tokenizer = tiny
    with pytest.raises(LazymlxError, match="a LazyState prompt_cache goes with lazy="):
        next(lazymlx.stream_generate(model, tokenizer, "the", prompt_cache=LazyState(model)))
    with pytest.raises(LazymlxError, match="batch size 1"):
        next(
            lazymlx.stream_generate(model, tokenizer, mx.zeros((2, 3), mx.uint32), lazy=AGGRESSIVE)
        )
    with pytest.raises(LazymlxError, match="not supported with lazy=: kv_bits"):
        next(lazymlx.stream_generate(model, tokenizer, "the", lazy=AGGRESSIVE, kv_bits=4))


def test_an_interrupted_prompt_step_leaves_the_context_as_it_was(monkeypatch):
    model = random_model(num_layers=6)
    prompt, turn = random_tokens(120), random_tokens(30, seed=1)
    reference = LazyState(model)
    engine_greedy(model, prompt, 3, REVIVING, reference)
    expected, _ = engine_greedy(model, turn, 5, REVIVING, reference)

    state = LazyState(model)
    engine_greedy(model, prompt, 3, REVIVING, state)
    before = [(c.rows, c.offset) for c in state.layers], state.offset
    block, calls = blocks.block_forward, []

    def interrupted_block(*args):
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt  # Ctrl-C in the middle of the prompt step
        return block(*args)

    monkeypatch.setattr(prefill, "block_forward", interrupted_block)
    with pytest.raises(KeyboardInterrupt):
        engine_greedy(model, turn, 5, REVIVING, state)
    monkeypatch.setattr(prefill, "block_forward", block)
    assert ([(c.rows, c.offset) for c in state.layers], state.offset) == before
    assert engine_greedy(model, turn, 5, REVIVING, state)[0] == expected
    assert state.tokens == reference.tokens


@pytest.mark.parametrize("config", [LazyConfig(), AGGRESSIVE, REVIVING])
def test_prefill_chunks_change_nothing(config):
    model = random_model(num_layers=6)
    prompt, turn = random_tokens(150), random_tokens(60, seed=1)

    def two_turns(chunk):
        state = LazyState(model)
        first = engine_greedy(model, prompt, 4, config, state, chunk=chunk)
        second = engine_greedy(model, turn, 4, config, state, chunk=chunk)
        return first, second, np.array(state.aux.depths())

    whole, chunked = two_turns(2048), two_turns(16)
    for (tokens, logprobs), (chunked_tokens, chunked_logprobs) in zip(
        whole[:2], chunked[:2], strict=True
    ):
        assert tokens == chunked_tokens
        for a, b in zip(logprobs, chunked_logprobs, strict=True):
            assert mx.allclose(a, b, atol=1e-4)
    assert np.array_equal(whole[2], chunked[2])


def scored_calls(monkeypatch) -> list[np.ndarray]:
    """Records the attention scores each pruning layer computes."""
    calls = []
    original = prefill.attention_scores

    def recording(*args, **kwargs):
        scores = original(*args, **kwargs)
        calls.append(np.array(scores))
        return scores

    monkeypatch.setattr(prefill, "attention_scores", recording)
    return calls


def test_static_selection_ranks_once_by_the_first_pruning_layer(monkeypatch):
    monkeypatch.setattr(engine_config, "POOL", 0)  # each token by its own first score
    monkeypatch.setattr(engine_config, "KEEP_FIRST", 0)
    model = random_model(num_layers=8)
    calls = scored_calls(monkeypatch)
    state = LazyState(model)
    state.record = []
    config = LazyConfig(schedule=AGGRESSIVE.schedule, selection="static")
    engine_greedy(model, random_tokens(120), 4, config, state)
    assert len(calls) == 1  # one ranking for the prompt, none in sparse decode
    computed = [positions for _, positions in state.record[:8]]
    others = [p for p in np.argsort(-calls[0], kind="stable").tolist() if p != 119]
    for layer in (1, 3, 4):  # the pruning layers: floor(0.2·8), floor(0.4·8), floor(0.6·8)
        kept = computed[layer + 1]
        # the last token, then the best of the others by the first layer's scores
        assert set(kept) == {119, *others[: len(kept) - 1]}


def test_random_selection_repeats_and_is_not_the_attentions_pick(monkeypatch):
    model = random_model(num_layers=8)
    calls = scored_calls(monkeypatch)
    kept = []
    for selection in ("random", "random", "attention"):
        state = LazyState(model)
        state.record = []
        config = LazyConfig(schedule=AGGRESSIVE.schedule, selection=selection)
        engine_greedy(model, random_tokens(120), 0, config, state)
        kept.append([positions for _, positions in state.record])
    assert len(calls) == 3  # only the attention run looked at attention, once a pruning layer
    assert kept[0] == kept[1] and kept[0] != kept[2]
    assert [len(c) for c in kept[0]] == [len(c) for c in kept[2]]  # same schedule, same sizes


@pytest.mark.parametrize("config", [AGGRESSIVE, REVIVING], ids=["sparse", "revive"])
def test_save_load_continue_gives_the_tokens_of_continuing_in_memory(tmp_path, config):
    model = random_model(num_layers=6)
    prompt, turn = random_tokens(100), random_tokens(20, seed=1)
    state = LazyState(model)
    engine_greedy(model, prompt, 6, config, state)
    path = tmp_path / "context.safetensors"
    save_context(path, Context(state, state.tokens, config=config), "tiny", "mine")
    assert [p.name for p in tmp_path.iterdir()] == ["context.safetensors"]  # nothing staged left
    _, metadata = load_prompt_cache(str(path), return_metadata=True)
    assert metadata["model"] == "tiny" and metadata["complete"] == "true"  # saving completed it
    assert metadata["preset"] == "mine" and json.loads(metadata["tokens"]) == state.tokens
    context, _ = load_context(path, model, "tiny", config)
    loaded = context.cache
    assert loaded.tokens == state.tokens and loaded.offset == state.offset
    assert [c.rows for c in loaded.layers] == [c.rows for c in state.layers]
    in_memory = engine_greedy(model, turn, 8, config, state)
    reloaded = engine_greedy(model, turn, 8, config, loaded)
    assert in_memory[0] == reloaded[0]
    for a, b in zip(in_memory[1], reloaded[1], strict=True):
        assert mx.allclose(a, b, atol=1e-5)


def test_a_context_file_written_before_exact_completion_went_loads_and_continues(monkeypatch):
    """tests/data/context_0.1.0.safetensors was written by lazymlx at feb4a14 (save_context of
    this pruned context, not completed, under that day's scoring: no sinks, the last token's
    attention, no pool); it loads here as the context this code builds."""
    for name, value in (("KEEP_FIRST", 0), ("WINDOW", 1), ("POOL", 0)):
        monkeypatch.setattr(engine_config, name, value)
    config = LazyConfig(schedule=((0.25, 0.5), (0.5, 0.5)), decode="revive")
    model = random_model(num_layers=6)
    state = LazyState(model)
    engine_greedy(model, random_tokens(40), 4, config, state)
    path = Path(__file__).parent / "data" / "context_0.1.0.safetensors"
    context, extra = load_context(path, model, "tiny-6", config)
    assert extra == {"messages": [{"role": "user", "content": "hi"}]}
    assert context.tokens == state.tokens == context.cache.tokens and not context.complete
    assert np.array_equal(np.array(context.cache.aux.depths()), np.array(state.aux.depths()))
    turn = random_tokens(12, seed=5)
    assert (
        engine_greedy(model, turn, 6, config, context.cache)[0]
        == (engine_greedy(model, turn, 6, config, state)[0])
    )


def test_a_saved_context_from_another_model_is_refused(tmp_path):
    state = LazyState(random_model(num_layers=6))
    engine_greedy(state.adapter.model, random_tokens(30), 2, AGGRESSIVE, state)
    path = tmp_path / "c.safetensors"
    save_context(path, Context(state, state.tokens), "tiny", "mine")
    with pytest.raises(LazymlxError, match="6 layers cached, the model has 4"):
        load_context(path, random_model(num_layers=4), "tiny", AGGRESSIVE)


def test_a_trimmed_never_reviving_context_equals_one_that_never_saw_the_trimmed_tokens():
    never = LazyConfig(schedule=AGGRESSIVE.schedule, selection="static")  # decode sparse too
    model = random_model(num_layers=6)
    prompt, extra, turn = random_tokens(80), random_tokens(30, seed=1), random_tokens(10, seed=2)
    state, reference = LazyState(model), LazyState(model)
    engine_greedy(model, prompt, 0, never, state)
    engine_greedy(model, prompt, 0, never, reference)
    engine_greedy(model, extra, 5, never, state)  # a turn re-rendered differently later
    assert trim_prompt_cache(state, state.offset - len(prompt)) == len(extra) + 5
    assert state.tokens == reference.tokens
    assert [c.rows for c in state.layers] == [c.rows for c in reference.layers]
    ours = engine_greedy(model, turn, 6, never, state)[0]
    assert ours == engine_greedy(model, turn, 6, never, reference)[0]


def test_trimming_the_last_turn_moves_no_rows():
    """A turn's rows come last in every layer, so trimming it only shortens the layers, as
    mlx-lm's KVCache does: the next turn appends in place instead of growing a copy."""
    model = random_model(num_layers=6)
    prompt = random_tokens(80)
    state = LazyState(model)
    engine_greedy(model, prompt, 0, AGGRESSIVE, state)
    buffers = [cache.keys for cache in state.layers]
    rows = [cache.rows for cache in state.layers]
    engine_greedy(model, random_tokens(12, seed=1), 3, LazyConfig(), state)
    trim_prompt_cache(state, state.offset - len(prompt))
    assert [cache.rows for cache in state.layers] == rows
    assert all(cache.keys is b for cache, b in zip(state.layers, buffers, strict=True))


def test_trimming_a_reviving_context_keeps_the_revived_kv_of_earlier_tokens():
    model = random_model(num_layers=6)
    prompt, extra = random_tokens(80), random_tokens(30, seed=1)
    state = LazyState(model)
    engine_greedy(model, prompt, 0, REVIVING, state)
    engine_greedy(model, extra, 5, REVIVING, state)
    revived = np.array(state.aux.depths())[: len(prompt)]
    trim_prompt_cache(state, state.offset - len(prompt))
    depth = np.array(state.aux.depths())
    assert np.array_equal(depth, revived)  # what decode revived stays: it attended only earlier
    for layer, cache in enumerate(state.layers):
        rows = np.array(cache.row_positions())
        assert sorted(rows.tolist()) == np.flatnonzero(depth > layer).tolist()
        assert cache.offset == len(prompt)


def test_only_the_first_revive_steps_of_a_call_revive(monkeypatch):
    monkeypatch.setattr(engine_config, "REVIVE", 4)
    monkeypatch.setattr(engine_config, "REVIVE_STEPS", 2)
    model = random_model(num_layers=8)
    config = LazyConfig(schedule=AGGRESSIVE.schedule, decode="revive")
    state = LazyState(model)
    state.record = []
    engine_greedy(model, random_tokens(200), 10, config, state)
    decode = state.record[8:]  # after the prompt step's 8 layers, one record a layer a step
    steps = [decode[i : i + 8] for i in range(0, len(decode), 8)]
    revived = [sum(len(positions) - 1 for _, positions in step) for step in steps]
    assert len(steps) == 10 and revived[0] > 0 and revived[1] > 0
    assert revived[2:] == [0] * 8
    assert_each_pair_once_and_depths_agree(state)


def test_shape_rows_pools_in_text_order_whatever_the_cache_order():
    ranker = prefill.Ranker(LazyConfig(), start=0)
    text = np.array([0.1, 0.9, 0.2, 0.3, 0.05, 0.4], np.float32)
    rows = np.array([3, 0, 5, 1, 4, 2])  # cache order: revived rows come after later ones
    with constants(POOL=2):
        shaped = ranker.shape_rows(mx.array(text[rows]), mx.array(rows))
    pooled = np.array([max(text[max(0, i - 2) : i + 1]) for i in range(6)])
    assert np.allclose(np.array(shaped), pooled[rows])


@pytest.mark.parametrize("config", [AGGRESSIVE, REVIVING], ids=["sparse", "revive"])
def test_ctrl_c_while_a_decode_step_is_built_waits_for_it(monkeypatch, config):
    model = random_model(num_layers=6)
    prompt = random_tokens(80)
    reference = LazyState(model)
    expected = engine_greedy(model, prompt, 6, config, reference)[0]
    state = LazyState(model)
    add_row, interrupted = LazyKVCache.append, []

    def append_then_interrupt(self, *args):
        add_row(self, *args)
        if state.offset > len(prompt) + 2 and not interrupted:  # the third decode step
            interrupted.append(1)
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(LazyKVCache, "append", append_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        engine_greedy(model, prompt, 6, config, state)
    monkeypatch.setattr(LazyKVCache, "append", add_row)
    # the step landed whole on every layer, then Ctrl-C was raised
    assert [c.offset for c in state.layers] == [state.offset] * 6
    depth = np.array(state.aux.depths())
    for layer, cache in enumerate(state.layers):
        assert (
            sorted(np.array(cache.row_positions()).tolist())
            == np.flatnonzero(depth > layer).tolist()
        )
    assert state.tokens == reference.tokens[: state.offset]  # the tokens fed: prompt, answer
    assert state.tokens[len(prompt) :] == expected[: state.offset - len(prompt)]


def test_prompts_under_min_prompt_run_whole_and_match_keep_all():
    model = random_model(num_layers=6)
    config = LazyConfig(schedule=AGGRESSIVE.schedule, decode="revive", min_prompt=100)
    short, long = random_tokens(99), random_tokens(100)
    (tokens, logprobs), (whole, whole_logprobs) = (
        engine_greedy(model, short, 8, c) for c in (config, LazyConfig())
    )
    assert tokens == whole
    assert all(mx.array_equal(a, b) for a, b in zip(logprobs, whole_logprobs, strict=True))
    state = LazyState(model)
    engine_greedy(model, long, 0, config, state)
    assert (np.array(state.aux.depths()) < 6).any()  # at the threshold it prunes
    turn = LazyState(model)  # a short turn over a pruned context runs whole...
    engine_greedy(model, long, 0, config, turn)
    before = np.array(turn.aux.depths())
    turn.record = []
    engine_greedy(model, random_tokens(20, seed=1), 0, config, turn)
    computed = {layer: [] for layer in range(6)}
    for layer, positions in turn.record:
        computed[layer] += positions
    assert all(set(range(100, 120)) <= set(c) for c in computed.values())
    # ...and brings back context tokens, each resuming where it stopped
    after = np.array(turn.aux.depths())[:100]
    moved = np.flatnonzero(after != before)
    assert moved.size and (after[moved] > before[moved]).all()
    for layer, positions in computed.items():
        earlier = sorted(p for p in positions if p < 100)
        assert earlier == [p for p in moved.tolist() if before[p] <= layer < after[p]]


def window_rows(state: LazyState) -> list[int]:
    return [cache.rows for cache in state.layers if cache.window is not None]


@pytest.mark.parametrize(
    "config",
    [LazyConfig(), ENGINE_KEEP_ALL, FLOORED, MASS_KEEP_ALL],
    ids=["keep-all", "engine-prefill", "floor", "mass-1"],
)
def test_sliding_window_layers_keep_about_a_window_and_stay_stock(monkeypatch, config):
    """Gemma 3's local layers see the last 24 positions here: rows older than every query still
    to come are dropped, as stock's rotating cache drops them, and nothing else changes."""
    monkeypatch.setattr(lazymlx.engine.cache, "FORGET_SLACK", 8)
    model = random_model("gemma3_text")  # window 24, a global layer in 3
    prompt = random_tokens(200)
    state = LazyState(model)
    ours, our_logprobs = engine_greedy(model, prompt, 32, config, state, chunk=32)
    theirs, their_logprobs = stock_greedy(model, prompt, 32)
    assert ours == theirs
    for a, b in zip(our_logprobs, their_logprobs, strict=True):
        assert mx.abs(a - b).max().item() < 1e-4
    for cache in state.layers:
        whole = cache.window is None
        assert cache.rows == state.offset if whole else cache.rows <= 24 + 4 * 8 < state.offset


def test_a_sliding_window_model_ranks_and_prunes_at_global_layers_only(monkeypatch):
    """A local layer's attention never reaches tokens beyond its window, so it can't rank
    them: tokens stop going deeper only after a global layer (here 2 and 5 of 6), and every
    local layer forgets what its window no longer reaches."""
    monkeypatch.setattr(lazymlx.engine.cache, "FORGET_SLACK", 8)
    model = random_model("gemma3_text")
    state = LazyState(model)
    state.record = []
    engine_greedy(model, random_tokens(200), 4, AGGRESSIVE, state)
    computed = [len(positions) for _, positions in state.record[: state.num_layers]]
    assert state.pruning_layers(AGGRESSIVE) == {2: 0.125}  # its three depths all land on 2
    assert computed == [200] * 3 + [25] * 3
    assert all(cache.rows < 200 for cache in state.layers if cache.window is not None)


@pytest.mark.parametrize("config", [AGGRESSIVE, REVIVING], ids=["sparse", "revive"])
def test_forgetting_out_of_window_rows_changes_no_pruned_answer(monkeypatch, config):
    """Rows are dropped only past the first token still waiting at a layer (a pruned one a later
    step may revive), so pruning, revival and every log-prob are those of a context that forgets
    nothing; every pair is still computed once."""
    model = random_model("gemma3_text", num_layers=8)
    prompt = random_tokens(300)
    runs = []
    for slack in (10**9, 8):
        monkeypatch.setattr(lazymlx.engine.cache, "FORGET_SLACK", slack)
        state = LazyState(model)
        state.record = []
        runs.append((engine_greedy(model, prompt, 48, config, state, chunk=64), state))
    (kept, kept_state), (forgot, forgot_state) = runs
    assert forgot[0] == kept[0]
    for a, b in zip(forgot[1], kept[1], strict=True):  # fp32 sums over other row sets
        assert mx.abs(a - b).max().item() < 1e-4
    assert sum(window_rows(forgot_state)) < sum(window_rows(kept_state))
    counts = pair_counts(forgot_state)
    depth = np.array(forgot_state.aux.depths())
    assert np.array_equal(counts, (np.arange(8)[None, :] < depth[:, None]).astype(np.int32))
    for layer, cache in enumerate(forgot_state.layers):
        rows = set(np.array(cache.row_positions()).tolist())
        computed = set(np.flatnonzero(depth > layer).tolist())
        assert rows <= computed and {p for p in computed if p >= cache.forgotten} <= rows


def test_a_context_whose_windows_forgot_a_prefix_starts_over(monkeypatch, tmp_path):
    """A context cut back before what its windows kept can't be trimmed there: reuse starts a
    new one (as for stock's rotating cache); saved and loaded, it remembers how far it forgot."""
    monkeypatch.setattr(lazymlx.engine.cache, "FORGET_SLACK", 8)
    model = random_model("gemma3_text")
    prompt = random_tokens(200)
    context = Context(LazyState(model))
    engine_greedy(model, prompt, 1, LazyConfig(), context.cache)
    context.tokens = list(prompt)
    assert context.reuse(prompt + [5, 6], model) == 200  # a continuation keeps everything
    saved = tmp_path / "context.safetensors"
    save_context(saved, context, "tiny", "custom")
    loaded = load_context(saved, model, "tiny", LazyConfig())[0].cache
    assert [c.forgotten for c in loaded.layers] == [c.forgotten for c in context.cache.layers]
    assert [c.window for c in loaded.layers] == [c.window for c in context.cache.layers]
    assert context.reuse(prompt[:100] + [7, 8], model) == 0
    assert isinstance(context.cache, LazyState) and context.cache.offset == 0


def test_an_interrupted_step_on_sliding_windows_keeps_the_rows_from_before(monkeypatch):
    """Windows drop rows in the middle of a long step; rolling it back goes by position, so the
    layers hold exactly what they held before, less what a window dropped meanwhile."""
    monkeypatch.setattr(lazymlx.engine.cache, "FORGET_SLACK", 8)
    model = random_model("gemma3_text", num_layers=6)
    state = LazyState(model)
    engine_greedy(model, random_tokens(150), 2, REVIVING, state, chunk=32)
    before = {i: set(np.array(c.row_positions()).tolist()) for i, c in enumerate(state.layers)}
    start = state.offset
    block, calls = blocks.block_forward, []

    def interrupted_block(*args):
        calls.append(1)
        if len(calls) == 12:  # in layer 1, after layer 0's window dropped rows
            raise KeyboardInterrupt
        return block(*args)

    monkeypatch.setattr(prefill, "block_forward", interrupted_block)
    with pytest.raises(KeyboardInterrupt):
        engine_greedy(model, random_tokens(300, seed=4), 2, REVIVING, state, chunk=32)
    assert state.offset == start
    dropped = 0
    for i, cache in enumerate(state.layers):
        rows = set(np.array(cache.row_positions()).tolist())
        assert rows <= before[i] and all(p < cache.forgotten for p in before[i] - rows)
        assert {p for p in before[i] if p >= cache.forgotten} <= rows
        assert cache.offset == start
        dropped += len(before[i] - rows)
    assert dropped  # the step's windows did drop rows


def test_an_atomic_write_keeps_the_files_permissions(tmp_path):
    from lazymlx.engine.atomic import write_atomic

    new = write_atomic(tmp_path / "new.json", lambda staged: staged.write_text("{}"))
    assert new.stat().st_mode & 0o777 == 0o644  # not the temporary file's private 0600
    new.chmod(0o640)
    write_atomic(new, lambda staged: staged.write_text("[]"))
    assert new.stat().st_mode & 0o777 == 0o640 and new.read_text() == "[]"
