"""Where the context-parallel chain cuts a prompt: slices of equal cost on every rank.

A layer's cost over a slice is a cost per token and one per (query, key) pair it attends
(KV-Runahead's model), timed once per model on this machine; earlier slices attend to fewer
keys, so they get more tokens, and pruning thins the pairs faster than the tokens.
"""

from __future__ import annotations

import math
import time

import mlx.core as mx

from lazymlx.engine.blocks import attention_mask, block_forward
from lazymlx.engine.cache import LazyKVCache, LazyState
from lazymlx.engine.config import LazyConfig


def layer_cost(tokens: float, token_cost: float, pair_cost: float) -> float:
    """A layer over a prompt's first `tokens` tokens, causally: a cost per token and one per
    (query, key) pair it attends."""
    return token_cost * tokens + pair_cost * tokens * (tokens + 1) / 2


def partition(tokens: int, ranks: int, token_cost: float, pair_cost: float) -> list[int]:
    """Slice bounds so that every rank's share of a layer costs the same: a slice a..b costs
    token_cost × (b - a) + pair_cost × (queries × keys it attends), and earlier slices attend
    to fewer keys, so they get more tokens (KV-Runahead's uneven partition)."""
    total, bounds = layer_cost(tokens, token_cost, pair_cost), [0]
    for p in range(1, ranks):
        target = total * p / ranks  # solve layer_cost(x) = target
        a, b = pair_cost / 2, token_cost + pair_cost / 2
        x = target / b if a == 0 else (-b + math.sqrt(b * b + 4 * a * target)) / (2 * a)
        bounds.append(min(max(round(x), bounds[-1] + 1), tokens - (ranks - p)))
    return [*bounds, tokens]


def weighted_costs(
    config: LazyConfig, layers: int, token_cost: float, pair_cost: float
) -> tuple[float, float]:
    """The per-token and per-pair costs averaged over the layers as the schedule thins them: a
    layer keeping a share r of the tokens costs r per token and r² per pair (queries and keys
    both thinned), so pruning makes the token term weigh more and the slices more even."""
    ratios, share, tokens = config.pruning_layers(layers, deferred=False), 1.0, 0.0
    pairs = 0.0
    for layer in range(layers):
        tokens, pairs = tokens + share, pairs + share * share
        share *= ratios.get(layer, 1.0)
    return token_cost * tokens / layers, pair_cost * pairs / layers


def timed_costs(state: LazyState, tokens: int = 256, earlier: int = 768) -> tuple[float, float]:
    """Seconds per (token, layer) and per (query, key) pair on this machine: one block timed on
    `tokens` tokens alone and after `earlier` rows, the median of three each."""
    adapter, block = state.adapter, state.adapter.layers[0]
    x = mx.random.normal((1, tokens + earlier, adapter.hidden_size)).astype(state.dtype)
    mx.eval(x)

    def run(skip: int) -> float:
        times = []
        for _ in range(3):
            cache = LazyKVCache()
            if skip:
                positions = mx.arange(skip, dtype=mx.int32)
                block_forward(adapter, block, cache, x[:, :skip], positions, 0, "causal")
                mx.eval(cache.keys, cache.values)
            at = mx.arange(skip, skip + tokens, dtype=mx.int32)
            started = time.perf_counter()
            out, _ = block_forward(
                adapter, block, cache, x[:, skip : skip + tokens], at, skip,
                attention_mask(cache, at, None),
            )  # fmt: skip
            mx.eval(out)
            times.append(time.perf_counter() - started)
        return sorted(times)[1]

    alone, after = run(0), run(earlier)
    pair = max(after - alone, 0.0) / (tokens * earlier)
    token = max(alone - pair * tokens * (tokens + 1) / 2, 1e-12) / tokens
    return token, pair
