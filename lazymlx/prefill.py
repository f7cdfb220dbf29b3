"""The lazy prompt step: a prompt (or a new chat turn) run layer-major over the lazy context.

Pruning needs the last token's attention at each pruning layer before the deeper layers run, so
the step goes layer by layer; inside a layer the tokens go in chunks (mlx-lm's prefill step size),
each evaluated before the next, so activations and attention scores never outgrow stock mlx-lm's.
Every row a chunk appends comes after every row already in the layer's cache, so MLX's "causal"
mask is exact and no mask is ever built. At a pruning layer the step's tokens are ranked by the
last token's head-averaged attention on the device; the dropped ones save their hidden state to
their Aux slot and stop there (their depth). The selection never leaves the device: the step has
no host sync but the per-chunk evaluations.
"""

from __future__ import annotations

import math

import mlx.core as mx

from lazymlx.blocks import append_kv, block_forward, last_token_attention
from lazymlx.cache import LazyState
from lazymlx.config import LazyConfig

PREFILL_CHUNK = 2048  # mlx-lm's default prefill_step_size


class Ranker:
    """Scores this step's tokens at a pruning layer; higher scores go deeper.

    "attention" is LazyLLM's: the last token's head-averaged attention at this very layer.
    "static" scores once, at the step's first pruning layer, and ranks deeper layers by those same
    scores (the paper's one-shot pruning); "random" draws scores from a key seeded by the config's
    seed, the step's start and the layer, so a run repeats exactly.
    """

    def __init__(self, config: LazyConfig, start: int) -> None:
        self.selection, self.seed, self.start = config.selection, config.seed, start
        self.fixed: mx.array | None = None  # static: the first pruning layer's scores

    def scores(self, layer: int, query: mx.array, keys: mx.array, scale: float, count: int):
        if self.selection == "random":
            key = mx.random.key(self.seed * 1_000_003 + self.start * 101 + layer)
            return mx.random.uniform(shape=(count,), key=key)
        if self.fixed is not None:
            return self.fixed
        scores = last_token_attention(query, keys, scale)[-count:]  # this step's rows are last
        if self.selection == "static":
            self.fixed = scores
        return scores

    def keep(self, kept: mx.array) -> None:
        if self.fixed is not None:
            self.fixed = self.fixed[kept]


def prompt_step(
    state: LazyState, tokens: mx.array, config: LazyConfig, chunk: int = PREFILL_CHUNK
) -> mx.array:
    """Run `tokens` over the context, pruning by the config; the last token's logits (1, 1, vocab).

    An interrupted step (Ctrl-C in a long prefill) leaves the context as it was before it.
    """
    start, layers_before = state.offset, [cache.rows for cache in state.layers]
    try:
        return _layers(state, tokens, config, chunk)
    except BaseException:
        for cache, rows in zip(state.layers, layers_before, strict=True):
            cache.rows, cache.offset = rows, start
        state.aux.length, state.aux.depth_counts = start, None
        raise


def _layers(state: LazyState, tokens: mx.array, config: LazyConfig, chunk: int) -> mx.array:
    adapter, aux = state.adapter, state.aux
    num_layers = state.num_layers
    start, end = state.offset, state.offset + tokens.size
    aux.extend(tokens, depth=num_layers)
    aux.depth_counts = None  # pruning changes depths on the device
    keep = config.pruning_layers(num_layers)
    ranker = Ranker(config, start)
    forced = _forced(start, end, config.keep_first)
    h = adapter.embed(tokens[None])
    positions = mx.arange(start, end, dtype=mx.int32)  # of the tokens `h` carries, ascending
    first: int | None = start  # their first position while they are one run
    for layer, block in enumerate(adapter.layers):
        cache = state[layer]
        deepest = layer == num_layers - 1
        h, query = _layer(state, layer, block, h, positions, first, chunk, deepest)
        cache.offset = end
        if state.record is not None:
            state.record.append((layer, positions.tolist()))
        count = positions.size
        ratio = keep.get(layer)
        if deepest or not ratio or math.ceil(ratio * count) >= count:
            continue
        scores = ranker.scores(layer, query, cache.fetch()[0], block.self_attn.scale, count)
        sinks = (positions < config.keep_first) | (mx.arange(count) == count - 1)
        order = mx.argsort(-mx.where(sinks, mx.inf, scores.astype(mx.float32)))
        k = max(math.ceil(ratio * count), forced)
        kept, dropped = mx.sort(order[:k]), order[k:]
        aux.make_slots(adapter.hidden_size, state.dtype)
        aux.hidden[positions[dropped]] = h[0, dropped]
        aux.depth[positions[dropped]] = layer + 1
        ranker.keep(kept)
        h, positions, first = h[:, kept], positions[kept], None
        mx.eval(h, positions, aux.hidden, aux.depth)
    return adapter.logits(h[:, -1:])


def _layer(state, layer, block, h, positions, first, chunk, deepest):
    """One layer over the carried tokens in chunks; returns their outputs and the last query."""
    adapter, cache = state.adapter, state[layer]
    count, outputs, query = positions.size, [], None
    for begin in range(0, count, chunk):
        x, at = h[:, begin : begin + chunk], positions[begin : begin + chunk]
        run = None if first is None else first + begin
        last_chunk = begin + chunk >= count
        if deepest and not last_chunk:  # only the last token's output is ever read
            append_kv(adapter, block, cache, x, at, run)
            mx.eval(cache.keys, cache.values, cache.positions)
            continue
        out, query = block_forward(
            adapter, block, cache, x, at, run, "causal" if at.size > 1 else None, deepest
        )
        mx.eval(out, cache.keys, cache.values, cache.positions)
        outputs.append(out)
    return (outputs[0] if len(outputs) == 1 else mx.concatenate(outputs, axis=1)), query


def _forced(start: int, end: int, keep_first: int) -> int:
    """Tokens of the step that are never pruned: the sinks among them and the last one."""
    sinks = max(0, min(keep_first, end) - start)
    return sinks + (end - 1 >= keep_first)
