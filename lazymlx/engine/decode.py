"""The decode policies: what one decode step (or a prompt the config doesn't prune) computes.

- "sparse": the model's own forward pass over the compact caches: the new token attends to the
  KV each layer holds; pruned tokens stay pruned (as SpecPrefill, GemFilter and FastKV decode);
- "revive": at each pruning layer the new token's attention picks up to `revive` tokens that
  stopped right there; they resume from their Aux slot and go deeper with it, their new KV
  appended to the deeper caches, while the new token attends to every row of each layer.
  Every count is known on the host in advance, so the step never waits for the device and
  stays inside mlx-lm's pipelining; each (token, layer) pair is still computed at most once.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from lazymlx.engine.blocks import attention_mask, attention_probs, attention_scores, block_forward
from lazymlx.engine.cache import LazyState
from lazymlx.engine.config import LazyConfig


def forward_step(
    model: nn.Module, state: LazyState, inputs: mx.array, config: LazyConfig
) -> mx.array:
    """The model's own forward pass over the lazy context (sparse decode, unpruned prompts).

    A sliding-window layer needs its own mask over its own rows, which differ by layer once a
    context is pruned, and the model builds one mask for all: such models go through the
    engine's blocks, every layer in turn.
    """
    start = state.offset
    state.aux.extend(inputs[0], depth=state.num_layers)
    if state.record is not None:
        state.record += [
            (layer, list(range(start, state.offset))) for layer in range(state.num_layers)
        ]
    if not state.adapter.windowed:
        return model(inputs, cache=state.layers)
    state.forget_out_of_windows(start, state.pruning_layers(config))
    adapter, h = state.adapter, state.adapter.embed(inputs)
    positions = mx.arange(start, state.offset, dtype=mx.int32)
    for layer, (cache, block) in enumerate(zip(state.layers, adapter.layers, strict=True)):
        mask = attention_mask(cache, positions, adapter.sliding_windows[layer])
        h, _ = block_forward(adapter, block, cache, h, positions, start, mask)
        cache.ends_at(state.offset)
    return adapter.logits(h[:, -1:])


def revive_step(state: LazyState, inputs: mx.array, config: LazyConfig) -> mx.array:
    """One decode token with bounded revival; the logits (1, 1, vocab)."""
    adapter, aux, num_layers = state.adapter, state.aux, state.num_layers
    ratios = state.pruning_layers(config)
    position = state.offset
    state.forget_out_of_windows(position, ratios)
    aux.counts(num_layers)  # tokens per depth, read once here and kept exact below on the host
    aux.extend(inputs[0], depth=num_layers)
    h = adapter.embed(inputs)
    positions = mx.array([position], dtype=mx.int32)  # revived tokens first, the new token last
    revived = 0
    for layer, block in enumerate(adapter.layers):
        cache = state[layer]
        # revived queries see rows at their own position or earlier
        mask = attention_mask(cache, positions, adapter.sliding_windows[layer], ordered=not revived)
        deepest = layer == num_layers - 1
        first = None if revived else position
        h, query = block_forward(adapter, block, cache, h, positions, first, mask, deepest)
        cache.ends_at(position + 1)
        if state.record is not None:
            state.record.append((layer, positions.tolist()))
        if deepest or layer not in ratios:
            continue
        if revived:  # carried tokens stop here unless picked again
            aux.move(positions[:-1], layer + 1, num_layers, h[0, :-1])
        revived = min(config.revive, int(aux.counts(num_layers)[layer + 1]))
        if not revived:
            h, positions = h[:, -1:], positions[-1:]
            continue
        row_positions = cache.row_positions()
        scores = attention_scores(attention_probs(query, cache.fetch()[0], block.self_attn.scale))
        waiting = aux.depth[row_positions] == layer + 1  # stopped here: KV here, none deeper
        picks = mx.argpartition(-mx.where(waiting, scores, -mx.inf), revived - 1)[:revived]
        picked = row_positions[picks]
        aux.move(picked, num_layers, layer + 1)
        h = mx.concatenate([aux.hidden[picked][None], h[:, -1:]], axis=1)
        positions = mx.concatenate([picked, positions[-1:]])
    return adapter.logits(h[:, -1:])
