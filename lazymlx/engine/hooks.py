"""What a parallel group changes in the engine, set from above (lazymlx/parallel/) when a process
joins one; in one process nothing is set and the engine runs as it is.

The engine imports nothing of the parallel wing: the wing hands it these two things instead.
- The group a model's heads are split over (tensor parallelism): the pruning scores and the
  memory check must come out the same on every rank, so they reduce over it
  (lazymlx/engine/blocks.py, lazymlx/engine/cache.py).
- A first prompt's lane on a context-parallel chain: rank 0's `prompt_step` runs a fresh
  context's prompt over it, the layer loop the same (lazymlx/engine/prefill.py: Lane).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import mlx.core as mx


@dataclass
class Hooks:
    heads_group: mx.distributed.Group | None = None
    first_prompt_lane: Callable | None = None  # (Step, tokens) -> Lane | None


_hooks = Hooks()


def heads_group() -> mx.distributed.Group | None:
    """The group this process's model's heads are split over; None in one process."""
    return _hooks.heads_group


def set_heads_group(group: mx.distributed.Group | None) -> None:
    _hooks.heads_group = group


def first_prompt_lane() -> Callable | None:
    """What gives a fresh context's prompt step its lane (a chain's rank 0: the chain, or None
    where the prompt runs here alone), or None."""
    return _hooks.first_prompt_lane


def set_first_prompt_lane(lanes: Callable | None) -> None:
    _hooks.first_prompt_lane = lanes


def smallest(value: float) -> float:
    """The smallest of every rank's `value` over the heads group, so all decide alike."""
    group = _hooks.heads_group
    if group is None:
        return value
    from mlx_lm.generate import generation_stream  # after the model's own collectives

    return mx.distributed.all_min(
        mx.array(float(value)), group=group, stream=generation_stream
    ).item()
