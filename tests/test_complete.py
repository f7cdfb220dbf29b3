"""Completing a pruned context (lazymlx/engine/complete.py) on tiny random models: fill computes each
missing (token, layer) pair once, a unit at a time leaves a context every later step can use."""

from __future__ import annotations

from dataclasses import replace

import mlx.core as mx
import numpy as np
import pytest
from conftest import engine_greedy, random_model, random_tokens
from mlx_lm.models.cache import load_prompt_cache, make_prompt_cache

from lazymlx import LazyState
from lazymlx.contexts import Context, load_context, save_context
from lazymlx.engine import complete
from lazymlx.engine.config import LazyConfig

PRUNING = LazyConfig(schedule=((0.25, 0.5), (0.5, 0.5)), decode="revive")
FILL = replace(PRUNING, complete="fill")


def pair_counts(state: LazyState) -> np.ndarray:
    counts = np.zeros((state.offset, state.num_layers), dtype=np.int32)
    for layer, positions in state.record:
        np.add.at(counts[:, layer], positions, 1)
    return counts


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
def test_fill_computes_each_missing_pair_once(family):
    model = random_model(family, num_layers=8)
    state = LazyState(model)
    state.record = []
    engine_greedy(model, random_tokens(200), 16, FILL, state)
    assert complete.pending(state, FILL)
    units = complete.complete_all(state, FILL, chunk=64)
    assert units > 1 and not complete.pending(state, FILL)
    assert np.array_equal(pair_counts(state), np.ones((state.offset, 8), np.int32))
    assert all(cache.rows == state.offset for cache in state.layers)  # KV everywhere


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
def test_filled_rows_equal_stock_through_the_layer_after_the_prune(family):
    """What fill computes is stock's computation where the prune changed nothing yet: every
    token's hidden state entering a pruning layer's next layer is stock's, so after completion
    each layer up to that one holds stock's keys and values for every prompt token; deeper, the
    kept tokens' rows differ (they attended without the pruned ones), as LazyLLM's do."""
    model = random_model(family, num_layers=8)
    prompt = random_tokens(300)
    stock = make_prompt_cache(model)
    model(mx.array(prompt)[None], cache=stock)
    config = LazyConfig(schedule=((0.5, 0.3),), complete="fill")
    state = LazyState(model)
    engine_greedy(model, prompt, 1, config, state)
    assert complete.pending(state, config)
    complete.complete_all(state, config)
    differences = []
    for layer in range(8):
        cache = state[layer]
        positions = np.array(cache.row_positions())
        rows = np.flatnonzero(positions < len(prompt))
        rows = rows[np.argsort(positions[rows])]
        assert len(rows) == len(prompt)
        ours = np.array(cache.keys[..., : cache.rows, :])[:, :, rows]
        theirs = np.array(stock[layer].state[0][..., : len(prompt), :])
        differences.append(np.abs(ours - theirs).max())
    (pruning,) = state.pruning_layers(config)  # Gemma 3 prunes at a global layer only
    assert max(differences[: pruning + 2]) < 1e-4, differences
    assert min(differences[pruning + 2 :]) > 1e-2, differences


def test_masked_attention_written_out_for_cuda_changes_nothing(monkeypatch):
    """On MLX's CUDA backend the engine's masked attention skips the fused kernel (its cuDNN plans
    are per shape); on this CPU a pruned, reviving, partly completed context answers through the
    written-out route as through the fused one."""
    model = random_model("qwen3", num_layers=8)
    prompt, question = random_tokens(200), random_tokens(40, seed=3)
    answers = []
    for cuda in (False, True):
        monkeypatch.setattr("lazymlx.engine.blocks.on_cuda", lambda cuda=cuda: cuda)
        state = LazyState(model)
        first, _ = engine_greedy(model, prompt, 8, FILL, state)
        complete.step(state, FILL, chunk=32)  # the question revives the rest
        later, logprobs = engine_greedy(model, question, 8, FILL, state)
        answers.append((first, later, logprobs))
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
    complete.complete_all(state, FILL, chunk=32)
    assert mx.get_cache_memory() == 0


def test_a_step_between_units_sees_a_consistent_context():
    """Stop after any unit, run a question (its prompt step revives what is missing), then finish:
    every pair is still computed at most once (fill), and the context ends whole."""
    model = random_model("llama", num_layers=8)
    state = LazyState(model)
    state.record = []
    engine_greedy(model, random_tokens(200), 4, FILL, state)
    complete.step(state, FILL, chunk=32)
    complete.step(state, FILL, chunk=32)
    engine_greedy(model, random_tokens(40, seed=2), 4, FILL, state)
    complete.complete_all(state, FILL, chunk=32)
    assert all(cache.rows == state.offset for cache in state.layers)
    depth = np.array(state.aux.depths())
    assert (depth == 8).all()
    assert pair_counts(state).max() == 1


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
    off = replace(PRUNING, complete="never")
    state = LazyState(model)
    engine_greedy(model, random_tokens(200), 4, off, state)
    assert not complete.pending(state, off) and complete.complete_all(state, off) == 0


def test_saving_completes_the_context_first_unless_told_not_to(tmp_path):
    model = random_model("llama", num_layers=8)
    for whole in (False, True):
        state = LazyState(model)
        engine_greedy(model, random_tokens(150), 4, FILL, state)
        context = Context(state, state.tokens, config=FILL)
        assert not context.complete
        path = tmp_path / "context.safetensors"
        save_context(path, context, "tiny", "custom", complete=whole)
        loaded, _ = load_context(path, model, "tiny", FILL)
        assert loaded.complete == context.complete == whole
        assert (
            load_prompt_cache(str(path), return_metadata=True)[1]["complete"] == str(whole).lower()
        )
        assert all(cache.rows == loaded.cache.offset for cache in loaded.cache.layers) == whole
