"""Context parallelism for the prompt step: KV-Runahead with LazyLLM pruning, on mx.distributed.

Every rank holds the whole model; a first prompt is cut into contiguous slices along the ring,
the last slice on rank 0, which does the I/O and decodes. The chain runs 1 → 2 → … → n-1 → 0,
so every hop is between ring neighbours (MLX's ring backend sends only to rank ± 1). Per layer a
rank receives the keys, values and original positions of every earlier slice's tokens still
carried there, and forwards them with its own at once, before it attends: it projects its own
tokens first (queries, keys, values need nothing from the other ranks), then attends causally over
every row and runs its MLP (chunked as the engine's `_layer` chunks) while the rows travel on, so
the next rank starts its layer once this one's keys exist, not once its whole layer is done
(KV-Runahead's overlap). Rank 0 ends each layer with every row, as one process would.

Pruning is the one-process rule, unchanged: the prompt's last tokens live in the last slice,
which by then holds every key of the layer, so rank 0 ranks (lazymlx/engine/prefill.py's
Ranker and `rank_own`) as soon as the keys and the last queries are there, before its own
attention, and sends the keep decision back along the ring (one byte per carried token). A token
pruned at a layer sends nothing deeper, and each (token, layer) is computed once, on the rank
that owns its slice. After the last layer the other ranks send rank 0 the Aux
slots of the tokens they pruned, so rank 0's LazyState is the one one process builds: same rows
per layer, depths and Aux slots (KV within fp32 rounding, equal where chunk boundaries align). Decode, revival, completion, saved contexts and later turns then
run on rank 0 alone, through the ordinary engine.

A receiver must know each message's shape in advance, and every rank does: the slices, the
pruning layers and the keep decisions are the same on all of them. Rows arrive with their
positions, which the receiver checks, so a protocol slip is one error line, not a corrupt
context. Rank 0 starts each step with a header (tokens, slices, pruning layers) that travels
the same way as the decisions; the other ranks wait for headers in `follow` until rank 0's
`lead` block ends.

The messages themselves (one in flight, never two; a deadline on every wait inside a step) are
lazymlx/parallel/chain.py's; the slices' costs lazymlx/parallel/costs.py's. A rank runs its part
of a step through the engine's own layer loop (lazymlx/engine/prefill.py: `run_layers`) over its
lane (lazymlx/parallel/chain_lane.py); rank 0's `prompt_step` gets it from `chain_lane`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import mlx.core as mx
import numpy as np

from lazymlx.engine import hooks
from lazymlx.engine.cache import LazyState
from lazymlx.engine.config import LazyConfig
from lazymlx.engine.prefill import Step, observed_queries, run_layers
from lazymlx.errors import LazymlxError, RankError
from lazymlx.parallel import distributed
from lazymlx.parallel.chain import Chain, Plan
from lazymlx.parallel.chain_lane import ChainLane
from lazymlx.parallel.costs import layer_cost, partition, timed_costs, weighted_costs
from lazymlx.parallel.watchdog import Watchdog, stall_timeout

MIN_SLICE = 64  # a prompt shorter than this per rank runs on rank 0 alone: hops would cost more
STEP, STOP = 1, 0  # header kinds

_chain: Chain | None = None


def join(group: mx.distributed.Group) -> None:
    """Run this process's prompt steps as one rank of `group`'s chain (the CLI's --parallel
    context; every rank loads the whole model, unsharded)."""
    global _chain
    if group.size() < 2:
        raise LazymlxError("context parallelism needs a group of at least 2 ranks")
    if "NCCL_HOST_IP" in os.environ:  # how mlx.launch starts NCCL's ranks
        raise LazymlxError(
            "context parallelism needs send and receive, which MLX's NCCL backend lacks; "
            "launch with --backend ring (or jaccl), or use --parallel tensor"
        )
    _chain = Chain(group, Watchdog(stall_timeout()))
    if _chain.leads:  # the engine runs a fresh context's prompt through the chain
        hooks.set_first_prompt_lane(chain_lane)


def chain() -> Chain | None:
    return _chain


def check_model(state: LazyState) -> None:
    """Refuse, before any work, a model the chain can't run exactly."""
    if state.adapter.windowed:
        raise LazymlxError(
            "context parallelism runs models without sliding-window layers (this one has "
            "them); use --parallel tensor or one process"
        )


_costs: dict[int, tuple[float, float]] = {}  # per model (id): timed once per process


def plan_for(
    state: LazyState,
    tokens: mx.array,
    config: LazyConfig,
    chunk: int,
    prune: bool,
    tail: int,
    asked: int,
) -> Plan | None:
    """The chain's plan for a first prompt, or None where it runs on rank 0 alone (a context
    already there: a later turn; a prompt too short to be worth the hops)."""
    ranks = _chain.size
    if state.offset or tokens.size < MIN_SLICE * ranks:
        return None
    key = id(state.adapter.model)
    if key not in _costs:
        _costs[key] = timed_costs(state)
    token_cost, pair_cost = _costs[key]
    if prune and config.prunes:
        token_cost, pair_cost = weighted_costs(config, state.num_layers, token_cost, pair_cost)
    ratios = state.pruning_layers(config)
    deepest = state.num_layers - 1
    whole = layer_cost(tokens.size, *_costs[key])  # unweighted: the first layer keeps all
    return Plan(
        tokens=np.array(tokens).astype(np.int64),
        bounds=partition(tokens.size, ranks, token_cost, pair_cost),
        chunk=chunk,
        window=observed_queries(config, tail, asked),
        decisions=sorted(layer for layer in ratios if layer < deepest) if prune else [],
        layer_ms=math.ceil(whole * 1000),
    )


@contextmanager
def lead() -> Iterator[None]:
    """Rank 0's side of a context-parallel group: its prompt steps run on the chain meanwhile,
    and when it ends the other ranks stop following."""
    try:
        yield
    finally:
        stop()


@contextmanager
def alone() -> Iterator[None]:
    """On rank 0: its prompt steps run here alone meanwhile, as in one process (the other ranks
    wait for the next header), e.g. to time one process beside the chain (`lazymlx bench`)."""
    global _chain
    held, _chain = _chain, None
    hooks.set_first_prompt_lane(None)
    try:
        yield
    finally:
        _chain = held
        hooks.set_first_prompt_lane(chain_lane)


def stop() -> None:
    """On rank 0: tell the other ranks to stop following, once (a lost connection meanwhile is
    no news: they are gone already)."""
    global _chain
    if _chain is None or not _chain.leads:
        return
    with suppress(RuntimeError):
        _chain.send(mx.array([STOP, 0], mx.int32), -1, "header")
    _chain = None
    hooks.set_first_prompt_lane(None)


def follow(model: object) -> None:
    """A rank other than 0: run its slice of every chain step rank 0 starts, until it stops. A
    rank lost, stalled or out of step ends this process with one error line, as it ends every
    other rank's (lazymlx/parallel/distributed.py: fail)."""
    state = LazyState(model)
    check_model(state)
    try:
        while True:
            # idle until rank 0 starts a step: it may decode, serve nobody or time one process
            kind, length = _chain.receive((2,), mx.int32, -1, "header", idle=True).tolist()
            if _chain.next != 0:
                _chain.send(mx.array([kind, length], mx.int32), -1, "header")
            if kind == STOP:
                return
            encoded = _chain.receive((length,), mx.int32, -1, "header")
            if _chain.next != 0:
                _chain.send(encoded, -1, "header")
            lane = ChainLane.following(_chain, LazyState(model), Plan.decode(encoded))
            run_layers(lane.step, lane)
    except (RuntimeError, RankError) as error:
        distributed.fail(error)


def chain_lane(step: Step, tokens: mx.array) -> ChainLane | None:
    """Rank 0's lane for a fresh context's prompt step (the engine's `prompt_step` asks, through
    lazymlx/engine/hooks.py): the chain, its header sent, or None where the prompt runs here
    alone, as in one process (no chain led here, a prompt too short).

    `prompt_step` then runs the chain's layers, returns its result and leaves rank 0's context
    as one process would. A progress callback that raises (a cancelled request) is obeyed once
    the chain has finished the step (the other ranks are mid-step): the step is then rolled back
    and the error raised. A rank lost or out of step ends this process with one error line
    (lazymlx/parallel/distributed.py: fail), as it ends every other rank's.
    """
    if _chain is None or not _chain.leads:
        return None
    state, config = step.state, step.config
    check_model(state)
    plan = plan_for(state, tokens, config, step.chunk, step.phase.prune, step.tail, step.asked)
    if plan is None:
        return None
    encoded = plan.encode()
    _chain.send(mx.array([STEP, encoded.size], mx.int32), -1, "header")
    _chain.send(encoded, -1, "header")
    return ChainLane(_chain, step, plan)
