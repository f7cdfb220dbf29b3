"""The lazy prompt step: a prompt (or a new chat turn) run layer-major over the lazy context.

Pruning needs the last token's attention at each pruning layer before the deeper layers run, so
the step goes layer by layer; inside a layer the tokens go in chunks (mlx-lm's prefill step size),
each evaluated before the next, so activations and attention scores never outgrow stock mlx-lm's.
Every row a chunk appends comes after every row already in the layer's cache, so MLX's "causal"
mask is exact and no mask is ever built. At a pruning layer the step's tokens are ranked by the
attention the step's last tokens pay them, on the device; the dropped ones save their hidden state
to their Aux slot and stop there (their depth). The selection never leaves the device: the step
has no host sync but the per-chunk evaluations.
"""

from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx

from lazymlx.blocks import append_kv, attention_scores, block_forward
from lazymlx.cache import LazyKVCache, LazyState
from lazymlx.config import LazyConfig

PREFILL_CHUNK = 2048  # mlx-lm's default prefill_step_size


class Ranker:
    """Scores this step's tokens at a pruning layer; higher scores go deeper.

    "attention" is LazyLLM's rule, widened by the config: the attention the step's last `window`
    tokens pay at this very layer, reduced over heads, each token then scoring the best of the
    `pool` tokens before it. "static" scores once, at the step's first pruning layer, and
    ranks deeper layers by those same scores (the paper's one-shot pruning); "random" draws scores
    from a key seeded by the config's seed, the step's start and the layer, so a run repeats.
    """

    def __init__(self, config: LazyConfig, start: int) -> None:
        self.config, self.start = config, start
        self.fixed: mx.array | None = None  # static: the first pruning layer's scores

    def scores(self, layer: int, observed: mx.array, cache: LazyKVCache, scale: float, count: int):
        config = self.config
        if config.selection == "random":
            key = mx.random.key(config.seed * 1_000_003 + self.start * 101 + layer)
            return mx.random.uniform(shape=(count,), key=key)
        if self.fixed is None:
            rows = cache.row_positions()
            seen = rows[-observed.shape[2] :]  # the observing tokens are the layer's last rows
            mask = None if observed.shape[2] == 1 else rows[None] <= seen[:, None]
            scores = attention_scores(observed, cache.fetch()[0], scale, mask, config.heads)
            scores = scores[-count:]  # this step's rows are last
            if config.selection != "static":
                return _pooled(scores, config.pool)
            self.fixed = scores
        return _pooled(self.fixed, config.pool)

    def keep(self, kept: mx.array) -> None:
        if self.fixed is not None:
            self.fixed = self.fixed[kept]


Progress = Callable[[int, int], None]


def prompt_step(
    state: LazyState,
    tokens: mx.array,
    config: LazyConfig,
    chunk: int = PREFILL_CHUNK,
    progress: Progress | None = None,
) -> mx.array:
    """Run `tokens` over the context, pruning by the config; the last token's logits (1, 1, vocab).

    progress(done, total) is called after each layer, `done` being the share of the step's tokens
    whose layers are done (layer-major, so it climbs by a layer's worth); it may raise to cancel.
    An interrupted step (Ctrl-C in a long prefill, a cancelled request) leaves the context as it
    was before it.
    """
    start, layers_before = state.offset, [cache.rows for cache in state.layers]
    try:
        return _layers(state, tokens, config, chunk, progress)
    except BaseException:
        for cache, rows in zip(state.layers, layers_before, strict=True):
            cache.rows, cache.offset = rows, start
        state.aux.length, state.aux.depth_counts = start, None
        raise


def _layers(state, tokens, config, chunk, progress) -> mx.array:
    adapter, aux = state.adapter, state.aux
    num_layers = state.num_layers
    start, end = state.offset, state.offset + tokens.size
    aux.extend(tokens, depth=num_layers)
    aux.depth_counts = None  # pruning changes depths on the device
    keep = config.pruning_layers(num_layers)
    ranker = Ranker(config, start)
    sinks = max(0, min(config.keep_first, end) - start)  # never pruned, so always the first carried
    h = adapter.embed(tokens[None])
    positions = mx.arange(start, end, dtype=mx.int32)  # of the tokens `h` carries, ascending
    first: int | None = start  # their first position while they are one run
    for layer, block in enumerate(adapter.layers):
        cache = state[layer]
        deepest = layer == num_layers - 1
        h, observed = _layer(
            state, layer, block, h, positions, first, chunk, deepest, config.window
        )
        cache.offset = end
        if state.record is not None:
            state.record.append((layer, positions.tolist()))
        if progress is not None:
            progress(tokens.size * (layer + 1) // num_layers, tokens.size)
        count = positions.size
        recent = max(1, config.keep_last)
        k = max(keep[layer].count(count), min(count, sinks + recent)) if layer in keep else count
        if deepest or k >= count:
            continue
        scores = ranker.scores(layer, observed, cache, block.self_attn.scale, count)
        index = mx.arange(count)
        forced = (index < sinks) | (index >= count - recent)
        order = mx.argsort(-mx.where(forced, mx.inf, scores.astype(mx.float32)))
        kept, dropped = mx.sort(order[:k]), order[k:]
        aux.make_slots(adapter.hidden_size, state.dtype)
        aux.hidden[positions[dropped]] = h[0, dropped]
        aux.depth[positions[dropped]] = layer + 1
        ranker.keep(kept)
        h, positions, first = h[:, kept], positions[kept], None
        mx.eval(h, positions, aux.hidden, aux.depth)
    return adapter.logits(h[:, -1:])


def _layer(state, layer, block, h, positions, first, chunk, deepest, window):
    """One layer over the carried tokens in chunks; their outputs and the last `window` queries."""
    adapter, cache = state.adapter, state[layer]
    count, outputs, observed = positions.size, [], None
    for begin in range(0, count, chunk):
        x, at = h[:, begin : begin + chunk], positions[begin : begin + chunk]
        run = None if first is None else first + begin
        last_chunk = begin + chunk >= count
        if deepest and not last_chunk:  # only the last token's output is ever read
            append_kv(adapter, block, cache, x, at, run)
            mx.eval(cache.keys, cache.values, cache.positions)
            continue
        mask = "causal" if at.size > 1 else None
        out, queries = block_forward(adapter, block, cache, x, at, run, mask, deepest, window)
        # a short last chunk observes with the previous chunk's last queries too
        observed = queries if observed is None else mx.concatenate([observed, queries], axis=2)
        observed = observed[:, :, -window:]
        mx.eval(out, observed, cache.keys, cache.values, cache.positions)
        outputs.append(out)
    return (outputs[0] if len(outputs) == 1 else mx.concatenate(outputs, axis=1)), observed


def _pooled(scores: mx.array, pool: int) -> mx.array:
    """Each score raised to the best of the `pool` scores before it: a chosen token takes the
    tokens that follow it along (a number's other digits, the rest of its sentence)."""
    if not pool:
        return scores
    padded = mx.pad(scores, (pool, 0), constant_values=-mx.inf)
    return mx.max(mx.stack([padded[i : i + scores.size] for i in range(pool + 1)]), axis=0)
