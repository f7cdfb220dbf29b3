"""Completing a pruned context (lazymlx/engine/complete.py) on tiny random models: fill computes each
missing (token, layer) pair once, exact gives stock's keys and values, a unit at a time leaves a
context every later step can use."""

from __future__ import annotations

from dataclasses import replace

import mlx.core as mx
import numpy as np
import pytest
from conftest import engine_greedy, random_model, random_tokens
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import KVCache

from lazymlx import LazyState
from lazymlx.engine import complete
from lazymlx.engine.config import LazyConfig

PRUNING = LazyConfig(schedule=((0.25, 0.5), (0.5, 0.5)), decode="revive", revive=4)
FILL, EXACT = replace(PRUNING, complete="fill"), replace(PRUNING, complete="exact")


def pair_counts(state: LazyState) -> np.ndarray:
    counts = np.zeros((state.offset, state.num_layers), dtype=np.int32)
    for layer, positions in state.record:
        np.add.at(counts[:, layer], positions, 1)
    return counts


def rows_by_position(cache) -> tuple[np.ndarray, mx.array, mx.array]:
    order = np.argsort(np.array(cache.row_positions()))
    keys, values = cache.fetch()
    index = mx.array(order.astype(np.int32))
    return np.array(cache.row_positions())[order], keys[..., index, :], values[..., index, :]


def stock_kv(model, tokens: list[int]) -> list[tuple[mx.array, mx.array]]:
    """Stock's keys and values at every layer (plain caches, so local layers keep every row)."""
    cache = [KVCache() for _ in model.layers]
    model(mx.array([tokens]), cache=cache)
    return [(c.keys[..., : c.offset, :], c.values[..., : c.offset, :]) for c in cache]


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
def test_fill_computes_each_missing_pair_once(family):
    model = random_model(family, num_layers=8)
    state = LazyState(model)
    state.record = []
    engine_greedy(model, random_tokens(200), 16, FILL, state)
    assert complete.pending(state, FILL)
    units = complete.complete(state, FILL, chunk=64)
    assert units > 1 and not complete.pending(state, FILL)
    assert np.array_equal(pair_counts(state), np.ones((state.offset, 8), np.int32))
    assert all(cache.rows == state.offset for cache in state.layers)  # KV everywhere


@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma3_text"])
def test_exact_completion_gives_stock_keys_and_values(family):
    model = random_model(family, num_layers=8)
    prompt = random_tokens(200)
    state = LazyState(model)
    tokens, _ = engine_greedy(model, prompt, 8, EXACT, state)
    complete.complete(state, EXACT, chunk=48)
    assert not complete.pending(state, EXACT)
    context = prompt + tokens  # mlx-lm's loop feeds each token before yielding it
    assert state.offset == len(context)
    for ours, (keys, values) in zip(state.layers, stock_kv(model, context), strict=True):
        positions, our_keys, our_values = rows_by_position(ours)
        assert positions.tolist() == list(range(len(context)))
        assert mx.abs(our_keys - keys).max().item() < 1e-4
        assert mx.abs(our_values - values).max().item() < 1e-4


def test_masked_attention_written_out_for_cuda_changes_nothing(monkeypatch):
    """On MLX's CUDA backend the engine's masked attention skips the fused kernel (its cuDNN plans
    are per shape); on this CPU the written-out route gives stock's keys and values after exact
    completion, and a pruned, reviving, completed context answers as through the fused one."""
    model = random_model("qwen3", num_layers=8)
    prompt, question = random_tokens(200), random_tokens(40, seed=3)
    answers = []
    for cuda in (False, True):
        monkeypatch.setattr("lazymlx.engine.blocks.on_cuda", lambda cuda=cuda: cuda)
        state = LazyState(model)
        tokens, _ = engine_greedy(model, prompt, 8, EXACT, state)
        complete.complete(state, EXACT, chunk=48)
        for ours, (keys, values) in zip(state.layers, stock_kv(model, state.tokens), strict=True):
            _, our_keys, our_values = rows_by_position(ours)
            assert mx.abs(our_keys - keys).max().item() < 1e-4
            assert mx.abs(our_values - values).max().item() < 1e-4
        state = LazyState(model)
        first, _ = engine_greedy(model, prompt, 8, FILL, state)
        complete.step(state, FILL, chunk=32)  # the question revives the rest
        later, logprobs = engine_greedy(model, question, 8, FILL, state)
        answers.append((tokens, first, later, logprobs))
    (*fused, fused_logprobs), (*written, written_logprobs) = answers
    assert fused == written
    for a, b in zip(fused_logprobs, written_logprobs, strict=True):
        assert mx.abs(a - b).max().item() < 1e-4


def test_finishing_a_completion_returns_mlx_cached_buffers():
    """The units leave MLX's buffer cache full of odd sizes, which the next request paid to
    release on CUDA; the unit that completes the context returns them."""
    model = random_model("llama", num_layers=8)
    state = LazyState(model)
    engine_greedy(model, random_tokens(200), 4, FILL, state)
    complete.step(state, FILL, chunk=32)
    assert complete.pending(state, FILL) and mx.get_cache_memory() > 0
    complete.complete(state, FILL, chunk=32)
    assert mx.get_cache_memory() == 0


def test_a_question_after_exact_completion_answers_as_stock():
    model = random_model("llama", num_layers=8)
    prompt, question = random_tokens(200), random_tokens(12, seed=1)
    state = LazyState(model)
    tokens, _ = engine_greedy(model, prompt, 6, EXACT, state)
    complete.complete(state, EXACT)
    short = replace(EXACT, min_prompt=64)  # the question runs whole, as a short one does
    later, later_logprobs = engine_greedy(model, question, 10, short, state)
    stock = [
        (t, lp)
        for t, lp in generate_step(mx.array(prompt + tokens + question), model, max_tokens=10)
    ]
    assert later == [t for t, _ in stock]
    for a, (_, b) in zip(later_logprobs, stock, strict=True):
        assert mx.abs(a - b).max().item() < 1e-3


@pytest.mark.parametrize("config", [FILL, EXACT], ids=["fill", "exact"])
def test_a_step_between_units_sees_a_consistent_context(config):
    """Stop after any unit, run a question (its prompt step revives what is missing), then finish:
    every pair is still computed at most once (fill), and the context ends whole."""
    model = random_model("llama", num_layers=8)
    state = LazyState(model)
    state.record = []
    tokens, _ = engine_greedy(model, random_tokens(200), 4, config, state)
    complete.step(state, config, chunk=32)
    complete.step(state, config, chunk=32)
    engine_greedy(model, random_tokens(40, seed=2), 4, config, state)
    complete.complete(state, config, chunk=32)
    assert all(cache.rows == state.offset for cache in state.layers)
    depth = np.array(state.aux.depths())
    assert (depth == 8).all()
    if config.complete == "fill":
        assert pair_counts(state).max() == 1
    else:  # what the step computed over a partial context is recomputed: stock's KV again
        for ours, (keys, values) in zip(state.layers, stock_kv(model, state.tokens), strict=True):
            _, our_keys, our_values = rows_by_position(ours)
            assert mx.abs(our_keys - keys).max().item() < 1e-4
            assert mx.abs(our_values - values).max().item() < 1e-4


def test_paced_units_last_about_the_unit_budget(monkeypatch):
    """A unit takes as many tokens as fit UNIT_SECONDS at the pace the last one ran (a fake clock:
    2 ms a token), growing at most twofold a unit; every pair is still computed once."""
    model = random_model("llama", num_layers=8)
    state = LazyState(model)
    state.record = []
    engine_greedy(model, random_tokens(300), 4, FILL, state)
    now, tokens = [0.0], []
    real_fill = complete._fill

    def timed_fill(state, layer, chunk, config):
        computed = real_fill(state, layer, chunk, config)
        tokens.append((chunk, computed))
        now[0] += 0.002 * computed
        return computed

    monkeypatch.setattr(complete, "_fill", timed_fill)
    monkeypatch.setattr(complete.time, "perf_counter", lambda: now[0])
    while complete.step(state, FILL):
        pass
    chunks = [chunk for chunk, _ in tokens]
    assert chunks[:2] == [complete.FIRST_CHUNK, complete.UNIT_SECONDS / 0.002]  # 64, then 50
    for (chunk, computed), following in zip(tokens[:-1], chunks[1:], strict=True):
        assert following == max(complete.SMALLEST_CHUNK, min(50, 2 * chunk))
        assert computed <= chunk
    assert pair_counts(state).max() == 1 and not complete.pending(state, FILL)


def test_off_completes_nothing():
    model = random_model("llama", num_layers=8)
    off = replace(PRUNING, complete="off")
    state = LazyState(model)
    engine_greedy(model, random_tokens(200), 4, off, state)
    assert not complete.pending(state, off) and complete.complete(state, off) == 0


def test_a_saved_exact_context_completes_after_loading(tmp_path):
    """Bases are not saved: a loaded context recomputes its inexact tokens from the first layer,
    and still ends with stock's keys and values."""
    model = random_model("llama", num_layers=8)
    prompt = random_tokens(150)
    state = LazyState(model)
    tokens, _ = engine_greedy(model, prompt, 4, EXACT, state)
    path = tmp_path / "context.safetensors"
    state.save(path, complete=False)
    loaded, metadata = LazyState.load(path, model, return_metadata=True)
    assert metadata["complete"] == "false"
    assert loaded.aux.inexact_from == state.aux.inexact_from is not None
    complete.complete(loaded, EXACT)
    for ours, (keys, _) in zip(loaded.layers, stock_kv(model, prompt + tokens), strict=True):
        _, our_keys, _ = rows_by_position(ours)
        assert mx.abs(our_keys - keys).max().item() < 1e-4


def test_saving_completes_the_context_first(tmp_path):
    model = random_model("llama", num_layers=8)
    state = LazyState(model)
    engine_greedy(model, random_tokens(150), 4, FILL, state)
    assert not state.complete
    path = tmp_path / "context.safetensors"
    state.save(path)
    loaded, metadata = LazyState.load(path, model, return_metadata=True)
    assert metadata["complete"] == "true" and state.complete
    assert all(cache.rows == loaded.offset for cache in loaded.layers)


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
def test_exact_after_a_config_of_other_depths_still_ends_with_stock_kv(family):
    """Bases kept at one config's first pruning layer are not used by another's."""
    model = random_model(family, num_layers=8)
    state = LazyState(model)
    early = replace(EXACT, schedule=((0.25, 0.5),))
    tokens, _ = engine_greedy(model, random_tokens(200), 4, early, state)
    late = replace(EXACT, schedule=((0.5, 0.5),))
    engine_greedy(model, random_tokens(30, seed=3), 4, late, state)
    complete.complete(state, late)
    for ours, (keys, _) in zip(state.layers, stock_kv(model, state.tokens), strict=True):
        _, our_keys, _ = rows_by_position(ours)
        assert mx.abs(our_keys - keys).max().item() < 1e-4
