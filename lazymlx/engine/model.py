"""The model as mlx-lm's generate_step sees it on a lazy context.

mlx-lm's own loop decodes (async pipelining, the generation stream, wired_limit, samplers, logits
processors, GenerationResponse); lazymlx only decides what one call of "the model" does: prompt
chunks are gathered until the whole prompt is there, then the lazy prompt step runs (pruning
ranks by the *last* prompt token; lazymlx/engine/prefill.py); a prompt the config doesn't prune
goes through the model's own forward pass, chunk by chunk, exactly as stock; a decode step
follows the config's policy (lazymlx/engine/decode.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn

from lazymlx.engine import hooks, policy
from lazymlx.engine.cache import LazyState
from lazymlx.engine.config import LazyConfig
from lazymlx.engine.decode import forward_step, revive_step
from lazymlx.engine.interrupts import interrupts_deferred
from lazymlx.engine.prefill import Progress, prompt_step


@dataclass(frozen=True)
class PromptCounts:
    """What a call's prompt step computed, known once it has run (before: the prompt's tokens
    at every layer, nothing revived).

    start: tokens in the context before the call; pairs_before: the (token, layer) pairs they
    had computed; pairs: the step's own (its tokens' and the ones it revived); revived: earlier
    tokens it brought back; how: why it pruned what it did, in a few words (the policy's).
    """

    start: int
    pairs_before: int
    pairs: int
    revived: int = 0
    how: str = ""


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
        tail: int = 0,
        asked: int = 0,
    ) -> None:
        super().__init__()
        self.model = model  # a child module, so mlx-lm's wired_limit counts the weights
        self.context, self.config, self.chunk, self.progress = state, config, chunk, progress
        # the prompt's closing chat-template tokens, and the user's question before them
        self.tail, self.asked = tail, asked  # (lazymlx/engine/templates.py)
        self.remaining = prompt_length  # prompt tokens not yet seen
        # a short prompt runs whole, but over a pruned context it still goes through the lazy
        # prompt step, which revives the context tokens it needs
        self.prune_own = policy.prunes_step(config, prompt_length)
        revives = config.prunes and config.prompt_revive and state.offset > 0
        revives = revives and bool(state.aux.counts(state.num_layers)[: state.num_layers].any())
        # rank 0 of a context-parallel group runs a first prompt on the chain, pruned or not
        chain = hooks.first_prompt_lane() if state.offset == 0 else None
        self.lazy_prompt = self.prune_own or revives or chain is not None
        self.pending: list[mx.array] = []  # the prompt's chunks, for the lazy prompt step
        self.decoded = 0  # decode steps run with revival
        pairs = prompt_length * state.num_layers
        short = policy.SHORT if config.prunes and not self.prune_own else ""
        self.counts = PromptCounts(state.offset, state.pairs(), pairs, how=short)

    def __call__(self, inputs: mx.array, cache: object = None, **unused: object) -> mx.array | None:
        state = self.context
        prompt = self.remaining > 0
        if prompt:
            self.remaining -= inputs.shape[1]
        if prompt and self.lazy_prompt:
            self.pending.append(inputs[0])
            if self.remaining:
                return None  # generate_step ignores what a prompt chunk returns
            tokens = mx.concatenate(self.pending)
            step = prompt_step(
                state, tokens, self.config, self.chunk, self.progress, self.prune_own, self.tail,
                self.asked,
            )  # fmt: skip
            before = self.counts.pairs_before
            how = step.how if self.prune_own else self.counts.how
            self.counts = PromptCounts(
                self.counts.start, before, state.pairs() - before, step.revived, how
            )
            return step.logits
        with interrupts_deferred():  # a step half-applied to the caches would corrupt the context
            if not prompt and self.reviving():
                self.decoded += 1
                return revive_step(state, inputs, self.config)
            return forward_step(self.model, state, inputs, self.config)

    def reviving(self) -> bool:
        """Whether this decode step revives: the policy says so and some token is pruned."""
        config, layers = self.config, self.context.num_layers
        if config.decode != "revive" or not config.prunes:
            return False
        if config.revive_steps is not None and self.decoded >= config.revive_steps:
            return False
        return bool(self.context.aux.counts(layers)[:layers].any())
