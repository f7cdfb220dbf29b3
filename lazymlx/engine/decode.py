"""The model as mlx-lm's generate_step sees it on a lazy context, and the decode policies.

mlx-lm's own loop decodes (async pipelining, the generation stream, wired_limit, samplers, logits
processors, GenerationResponse); lazymlx only decides what one call of "the model" does:
- prompt chunks are gathered until the whole prompt is there, then the lazy prompt step runs
  (pruning ranks by the *last* prompt token); a prompt the config doesn't prune goes through
  the model's own forward pass, chunk by chunk, exactly as stock;
- a decode step follows the config's policy:
  - "sparse": the model's own forward pass over the compact caches: the new token attends to the
    KV each layer holds; pruned tokens stay pruned (as SpecPrefill, GemFilter and FastKV decode);
  - "revive": at each pruning layer the new token's attention picks up to `revive` tokens that
    stopped right there; they resume from their Aux slot and go deeper with it, their new KV
    appended to the deeper caches, while the new token attends to every row of each layer.
    Every count is known on the host in advance, so the step never waits for the device and
    stays inside mlx-lm's pipelining; each (token, layer) pair is still computed at most once.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import mlx.core as mx
import mlx.nn as nn

from lazymlx import context_parallel
from lazymlx.engine.blocks import attention_mask, attention_scores, block_forward
from lazymlx.engine.cache import LazyState
from lazymlx.engine.config import LazyConfig
from lazymlx.engine.prefill import Progress


class LazyModel(nn.Module):
    """Wraps a model for one generate_step call over `state`, whose prompt has `prompt_length`
    tokens; mlx-lm passes `state` back as the cache, so it is used directly."""

    def __init__(
        self,
        model: nn.Module,
        state: LazyState,
        config: LazyConfig,
        prompt_length: int,
        chunk: int,
        progress: Progress | None = None,
    ) -> None:
        super().__init__()
        self.model = model  # a child module, so mlx-lm's wired_limit counts the weights
        self.context, self.config, self.chunk, self.progress = state, config, chunk, progress
        state.config = config  # what completing the context later follows
        self.remaining = prompt_length  # prompt tokens not yet seen
        # a short prompt runs whole, but over a pruned context it still goes through the lazy
        # prompt step, which revives the context tokens it needs
        self.prunes = config.prunes and prompt_length >= config.min_prompt
        revives = config.prunes and config.prompt_revive and state.offset > 0
        revives = revives and bool(state.aux.counts(state.num_layers)[: state.num_layers].any())
        # rank 0 of a context-parallel group runs a first prompt on the chain, pruned or not
        chained = context_parallel.leading() and state.offset == 0
        self.pending: list[mx.array] | None = [] if self.prunes or revives or chained else None
        self.start = state.offset
        self.decoded = 0  # decode steps run with revival
        # (token, layer) pairs computed before this call and by its prompt step (its own tokens'
        # and any it revived), and the earlier tokens it revived, read before any decode step
        self.pairs_before = state.pairs()
        self.prompt_pairs = prompt_length * state.num_layers
        self.revived = 0

    def __call__(self, inputs: mx.array, cache: object = None, **unused: object) -> mx.array | None:
        state = self.context
        prompt = self.remaining > 0
        if prompt:
            self.remaining -= inputs.shape[1]
        if prompt and self.pending is not None:
            self.pending.append(inputs[0])
            if self.remaining:
                return None  # generate_step ignores what a prompt chunk returns
            prompt = mx.concatenate(self.pending)
            logits = context_parallel.lazy_prompt_step(
                state, prompt, self.config, self.chunk, self.progress, self.prunes
            )
            self.prompt_pairs = state.pairs() - self.pairs_before
            self.revived = state.revived
            return logits
        with interrupts_deferred():  # a step half-applied to the caches would corrupt the context
            if not prompt and self.reviving():
                self.decoded += 1
                return revive_step(state, inputs, self.config)
            return self._forward(inputs)

    @property
    def prunes_prompt(self) -> bool:
        """Whether the prompt goes through the lazy prompt step (else the model's own forward)."""
        return self.pending is not None

    def _forward(self, inputs: mx.array) -> mx.array:
        """The model's own forward pass over the lazy context (sparse decode, unpruned prompts).

        A sliding-window layer needs its own mask over its own rows, which differ by layer
        once a context is pruned, and the model builds one mask for all: such models go
        through the engine's blocks, every layer in turn.
        """
        state = self.context
        start = state.offset
        state.aux.extend(inputs[0], depth=state.num_layers)
        if state.record is not None:
            state.record += [
                (layer, list(range(start, state.offset))) for layer in range(state.num_layers)
            ]
        if not state.adapter.windowed:
            return self.model(inputs, cache=state.layers)
        keep = state.pruning_layers(self.config)
        state.forget_out_of_windows(start, keep)
        adapter, h = state.adapter, state.adapter.embed(inputs)
        positions = mx.arange(start, state.offset, dtype=mx.int32)
        for layer, (cache, block) in enumerate(zip(state.layers, adapter.layers, strict=True)):
            mask = attention_mask(cache, positions, adapter.sliding_windows[layer])
            h, _ = block_forward(adapter, block, cache, h, positions, start, mask)
            cache.offset = state.offset
        return adapter.logits(h[:, -1:])

    def reviving(self) -> bool:
        """Whether this decode step revives: the policy says so and some token is pruned."""
        config, layers = self.config, self.context.num_layers
        if config.decode != "revive" or not config.prunes:
            return False
        if config.revive_steps is not None and self.decoded >= config.revive_steps:
            return False
        return bool(self.context.aux.counts(layers)[:layers].any())


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold Ctrl-C until the block is done, then raise it (main thread only, where it arrives).

    A decode step only builds a graph (milliseconds), so holding Ctrl-C costs nothing; a prompt
    step can be long, and rolls back instead (lazymlx/engine/prefill.py).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt


def revive_step(state: LazyState, inputs: mx.array, config: LazyConfig) -> mx.array:
    """One decode token with bounded revival; the logits (1, 1, vocab)."""
    adapter, aux, num_layers = state.adapter, state.aux, state.num_layers
    keep = state.pruning_layers(config)
    position = state.offset
    state.forget_out_of_windows(position, keep)
    counts = aux.counts(num_layers)  # tokens per depth, kept exact below without a device read
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
        cache.offset = position + 1
        if state.record is not None:
            state.record.append((layer, positions.tolist()))
        if deepest or layer not in keep:
            continue
        if revived:  # carried tokens stop here unless picked again
            aux.move(positions[:-1], layer + 1, num_layers, h[0, :-1])
        revived = min(config.revive, int(counts[layer + 1]))
        if not revived:
            h, positions = h[:, -1:], positions[-1:]
            continue
        rows = cache.row_positions()
        scores = attention_scores(query, cache.fetch()[0], block.self_attn.scale)
        waiting = aux.depth[rows] == layer + 1  # stopped here: KV at this layer, none deeper
        picks = mx.argpartition(-mx.where(waiting, scores, -mx.inf), revived - 1)[:revived]
        picked = rows[picks]
        aux.move(picked, num_layers, layer + 1)
        h = mx.concatenate([aux.hidden[picked][None], h[:, -1:]], axis=1)
        positions = mx.concatenate([picked, positions[-1:]])
    return adapter.logits(h[:, -1:])
