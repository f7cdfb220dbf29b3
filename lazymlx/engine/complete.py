"""Completing a pruned context: every token gets keys and values at every layer, in idle time.

LazyLLM defers work: a pruned token's deeper layers are computed later, if ever. On one prompt
that is the whole saving, but a context kept for later turns (a chat, the server's kept
conversations, a saved document) otherwise pays for it on the next question's critical path.
Completion does that work while the app is idle, in units of one layer chunk, each leaving a
consistent context, so whoever runs it can stop between any two units and a request then runs
over the partly completed context (its prompt step revives what is still missing). A unit's
length is paced to UNIT_SECONDS on the machine at hand: a layer chunk's cost grows with the
context (its attention reads every earlier row) and differs a hundredfold between a laptop CPU and
a GPU, so a fixed token count would be either slow to yield or needlessly fine.

Completion fills: each pruned token resumes from its Aux slot at the layer where it stopped, layer
by layer from the shallowest, in position order within a layer, so a token attends to every
earlier token there; each (token, layer) pair is computed once, as LazyLLM promises.
"""

from __future__ import annotations

import time

import mlx.core as mx
import numpy as np

from lazymlx.engine.blocks import append_kv, attention_mask, block_forward
from lazymlx.engine.cache import LazyState
from lazymlx.engine.config import LazyConfig
from lazymlx.engine.interrupts import interrupts_deferred

UNIT_SECONDS = 0.1  # a paced unit's length: what a request arriving during completion waits
COMPLETION_CHUNK = 512  # tokens per unit at most, and when nothing waits (complete_all())
FIRST_CHUNK, SMALLEST_CHUNK = 64, 8  # a paced unit's tokens before any is timed, and at least


def pending(state: LazyState, config: LazyConfig) -> bool:
    """Whether completing the context under `config` has work left."""
    if config.complete == "never" or not state.offset:
        return False
    return bool(state.aux.counts(state.num_layers)[: state.num_layers].any())


def next_chunk(state: LazyState) -> int:
    """The tokens the context's next paced unit takes (what the last unit's pace allows)."""
    return state.completion_chunk or FIRST_CHUNK


def paced(chunk: int, tokens: int, seconds: float) -> int:
    """The next unit's tokens after `tokens` of a `chunk`-token unit took `seconds`: as many as
    fit UNIT_SECONDS at that pace, growing at most twofold (the deepest layer, which only appends
    keys and values, is far cheaper than the next context's first layer)."""
    fits = UNIT_SECONDS * tokens / max(seconds, 1e-6)
    return round(max(SMALLEST_CHUNK, min(fits, 2 * chunk, COMPLETION_CHUNK)))


def step(state: LazyState, config: LazyConfig, chunk: int | None = None) -> bool:
    """One unit of completion (at most `chunk` tokens at one layer; None: paced to UNIT_SECONDS
    by the context's last units); whether work remains. Ctrl-C waits for the unit's end (it is
    short), so the context is never half updated."""
    with interrupts_deferred():
        counts = state.aux.counts(state.num_layers)
        waiting = np.flatnonzero(counts[: state.num_layers])
        if not waiting.size or config.complete == "never":
            return False
        tokens = next_chunk(state) if chunk is None else chunk
        start = time.perf_counter()
        computed = _fill(state, int(waiting[0]), tokens, config)
        if chunk is None:
            state.completion_chunk = paced(tokens, computed, time.perf_counter() - start)
        if not pending(state, config):
            # the units leave MLX's buffer cache full of odd sizes; on CUDA the next request
            # paid for releasing them (benchmarks/studies/2026-11-26-gpu-masked-attention/)
            mx.clear_cache()
            return False
    return True


def complete_all(state: LazyState, config: LazyConfig, chunk: int = COMPLETION_CHUNK) -> int:
    """Complete the whole context now (before saving it, say); the units run."""
    units = 0
    while pending(state, config):
        step(state, config, chunk)
        units += 1
    return units


def _fill(state: LazyState, layer: int, chunk: int, config: LazyConfig) -> int:
    """The first `chunk` tokens (by position) waiting at `layer` compute it from their Aux slot;
    how many did."""
    adapter, aux = state.adapter, state.aux
    depths = np.array(aux.depths())
    picked = np.flatnonzero(depths == layer)[:chunk]
    positions = mx.array(picked.astype(np.int32))
    h = aux.hidden[positions][None]
    block, cache = adapter.layers[layer], state[layer]
    mask = attention_mask(cache, positions, adapter.sliding_windows[layer], ordered=False)
    hidden = None
    if layer == state.num_layers - 1:  # the deepest layer: only its keys and values are read
        append_kv(adapter, block, cache, h, positions, None)
    else:
        hidden = block_forward(adapter, block, cache, h, positions, None, mask)[0][0]
    aux.move(positions, layer + 1, layer, hidden)  # step() read the counts: they stay exact
    mx.eval(aux.hidden, aux.depth, cache.keys, cache.values, cache.positions)
    if state.record is not None:
        state.record.append((layer, picked.tolist()))
    if not aux.counts(state.num_layers)[
        layer
    ]:  # the layer is whole: a sliding window may drop what it no longer needs
        state.forget_out_of_windows(state.offset, state.pruning_layers(config))
    return picked.size
