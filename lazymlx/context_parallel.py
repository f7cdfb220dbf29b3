"""Context parallelism for the prompt step: KV-Runahead with LazyLLM pruning, on mx.distributed.

Every rank holds the whole model; a first prompt is cut into contiguous slices along the ring,
the last slice on rank 0, which does the I/O and decodes. The chain runs 1 → 2 → … → n-1 → 0,
so every hop is between ring neighbours (MLX's ring backend sends only to rank ± 1). Per layer a
rank receives the keys, values and original positions of every earlier slice's tokens still
carried there, appends them to its cache, runs its own tokens (chunked, with the engine's own
`_layer`) causally over them, and forwards the accumulated rows; rank 0 ends each layer with
every row, as one process would.

Pruning is the one-process rule, unchanged: the prompt's last tokens live in the last slice,
which by then holds every key of the layer, so rank 0 ranks (lazymlx/engine/prefill.py's
Ranker and `_rank_own`) and sends the keep decision back along the ring (one byte per carried
token). A token pruned at a layer sends nothing deeper, and each (token, layer) is computed
once, on the rank that owns its slice. After the last layer the other ranks send rank 0 the Aux
slots of the tokens they pruned, so rank 0's LazyState is the one one process builds: same rows
per layer, depths and Aux slots (KV within fp32 rounding, equal where chunk boundaries align). Decode, revival, completion, saved contexts and later turns then
run on rank 0 alone, through the ordinary engine.

A receiver must know each message's shape in advance, and every rank does: the slices, the
pruning layers and the keep decisions are the same on all of them. Rows arrive with their
positions, which the receiver checks, so a protocol slip is one error line, not a corrupt
context. Rank 0 starts each step with a header (tokens, slices, pruning layers) that travels
the same way as the decisions; the other ranks wait for headers in `follow` until rank 0's
`lead` block ends.

Every wait on a neighbour inside a step has a deadline (lazymlx/watchdog.py,
LAZYMLX_STALL_TIMEOUT): a rank that stalls with its connections open ends the chain with one
line per rank, naming the rank and what it waited for. The wait for the next header is idle by
design (rank 0 decodes, serves nobody, times one process) and has none: a rank 0 that dies
closes its connections, which ends the wait at once.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

import mlx.core as mx
import numpy as np

from lazymlx import distributed
from lazymlx.engine.cache import LazyState
from lazymlx.engine.config import LazyConfig
from lazymlx.engine.prefill import (
    PREFILL_CHUNK,
    Carried,
    Progress,
    PromptResult,
    Ranker,
    Step,
    _layer,
    _rank_own,
    _roll_back,
    prompt_step,
)
from lazymlx.errors import LazymlxError, RankError
from lazymlx.watchdog import Watchdog, stall_timeout

MIN_SLICE = 64  # a prompt shorter than this per rank runs on rank 0 alone: hops would cost more
STEP, STOP = 1, 0  # header kinds
# A healthy chain's longest wait is its filling up, at the first layer and after each keep
# decision: a rank waits for every slice ahead of it to run a layer, under one process's time
# for the whole layer with balanced slices (plus the ranking and the messages). Four of them
# leave room for a rank on a machine up to ~4x slower than rank 0's, where the costs are
# timed, and for the timing's extrapolation from 1k tokens to long prompts.
STALL_LAYERS = 4
MESSAGES = {  # what each message carries, for the lines of a rank that waited too long
    "header": "the step's header",
    "kv": "the keys and values of layer {layer}",
    "positions": "the positions of layer {layer}'s rows",
    "queries": "the last queries of layer {layer}",
    "decision": "the keep decision of layer {layer}",
    "slots": "the Aux slots of the pruned tokens",
}

_chain: Chain | None = None


@dataclass
class Traffic:
    """What this rank sent: (layer or -1 for the header and the end, what, bytes) per message."""

    messages: list[tuple[int, str, int]] = field(default_factory=list)

    def per_layer(self) -> dict[int, tuple[int, int]]:
        """layer → (messages, bytes)."""
        out: dict[int, tuple[int, int]] = {}
        for layer, _, size in self.messages:
            count, total = out.get(layer, (0, 0))
            out[layer] = (count + 1, total + size)
        return out


class Chain:
    """A group run as a context-parallel chain: rank 1 holds the first slice, rank 0 the last."""

    def __init__(self, group: mx.distributed.Group, watchdog: Watchdog) -> None:
        self.group, self.watchdog = group, watchdog
        self.rank, self.size = group.rank(), group.size()
        self.position = (self.rank - 1) % self.size  # in the chain
        self.next, self.previous = (self.rank + 1) % self.size, (self.rank - 1) % self.size
        self.traffic = Traffic()
        self.times: list[tuple[int, float]] = []  # (layer, seconds of own compute), last step
        self.plan: Plan | None = None  # the last step's

    @property
    def leads(self) -> bool:
        return self.rank == 0

    def deadline(self) -> float:
        """Seconds a wait of this step may take: STALL_LAYERS times its prompt's whole first
        layer as rank 0 models it, or the watchdog's floor (LAZYMLX_STALL_TIMEOUT) if longer."""
        modelled = STALL_LAYERS * self.plan.layer_ms / 1000 if self.plan is not None else 0.0
        return max(self.watchdog.floor, modelled)

    def send(self, array: mx.array, layer: int, what: str) -> None:
        """Send to the next rank now (an empty array sends nothing: the receiver knows); the
        send blocks until the bytes have passed, so it has a deadline too."""
        if not array.size:
            return
        sent = mx.distributed.send(array, self.next, group=self.group, stream=mx.cpu)
        with self.watchdog.waiting(
            f"rank {self.next} to take {_message(what, layer)}", self.deadline()
        ):
            mx.eval(sent)
        self.traffic.messages.append((layer, what, array.nbytes))

    def receive(
        self, shape: tuple[int, ...], dtype: mx.Dtype, layer: int, what: str, idle: bool = False
    ) -> mx.array:
        """Receive from the previous rank now (an empty shape receives nothing), within the
        stall deadline unless the wait is `idle` by design."""
        if not math.prod(shape):
            return mx.zeros(shape, dtype)
        received = mx.distributed.recv(shape, dtype, self.previous, group=self.group, stream=mx.cpu)
        if idle:
            mx.eval(received)
            return received
        with self.watchdog.waiting(
            f"{_message(what, layer)} from rank {self.previous}", self.deadline()
        ):
            mx.eval(received)
        return received


def _message(what: str, layer: int) -> str:
    return MESSAGES[what].format(layer=layer)


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


def chain() -> Chain | None:
    return _chain


def leading() -> bool:
    """Whether this process is rank 0 of a context-parallel group (the one that decodes)."""
    return _chain is not None and _chain.leads


def check_model(state: LazyState) -> None:
    """Refuse, before any work, a model the chain can't run exactly."""
    if state.adapter.windowed:
        raise LazymlxError(
            "context parallelism runs models without sliding-window layers (this one has "
            "them); use --parallel tensor or one process"
        )


@dataclass
class Plan:
    """One chain step as every rank runs it: the prompt, the slices (bounds[p]..bounds[p+1] for
    chain position p), the chunk, the scoring window, the layers whose keep decision rank 0
    sends back, and the whole prompt's first layer in one process as rank 0 models it (ms),
    which sets the step's stall deadline."""

    tokens: np.ndarray
    bounds: list[int]
    chunk: int
    window: int
    decisions: list[int]
    layer_ms: int = 0

    def encode(self) -> mx.array:
        head = [self.chunk, self.window, self.layer_ms, len(self.decisions), *self.decisions]
        head += [len(self.bounds), *self.bounds]
        return mx.array(np.concatenate([np.array(head, np.int64), self.tokens]).astype(np.int32))

    @classmethod
    def decode(cls, array: mx.array) -> Plan:
        values = np.array(array).astype(np.int64)
        chunk, window, layer_ms, count = (int(v) for v in values[:4])
        decisions = values[4 : 4 + count].tolist()
        at = 4 + count
        bounds = values[at + 1 : at + 1 + int(values[at])].tolist()
        return cls(values[at + 1 + len(bounds) :], bounds, chunk, window, decisions, layer_ms)


def partition(tokens: int, ranks: int, token_cost: float, pair_cost: float) -> list[int]:
    """Slice bounds so that every rank's share of a layer costs the same: a slice a..b costs
    token_cost × (b - a) + pair_cost × (queries × keys it attends), and earlier slices attend
    to fewer keys, so they get more tokens (KV-Runahead's uneven partition)."""

    def cost(x: float) -> float:
        return token_cost * x + pair_cost * x * (x + 1) / 2

    total, bounds = cost(tokens), [0]
    for p in range(1, ranks):
        target = total * p / ranks  # solve cost(x) = target
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
    ratios, share, tokens, pairs = config.pruning_layers(layers), 1.0, 0.0, 0.0
    for layer in range(layers):
        tokens, pairs = tokens + share, pairs + share * share
        share *= ratios.get(layer, 1.0)
    return token_cost * tokens / layers, pair_cost * pairs / layers


def timed_costs(state: LazyState, tokens: int = 256, earlier: int = 768) -> tuple[float, float]:
    """Seconds per (token, layer) and per (query, key) pair on this machine: one block timed on
    `tokens` tokens alone and after `earlier` rows, the median of three each."""
    from lazymlx.engine.blocks import attention_mask, block_forward
    from lazymlx.engine.cache import LazyKVCache

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


_costs: dict[int, tuple[float, float]] = {}  # per model (id): timed once per process


def plan_for(
    state: LazyState, tokens: mx.array, config: LazyConfig, chunk: int, prune: bool
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
    whole = _costs[key][0] * tokens.size + _costs[key][1] * tokens.size * (tokens.size + 1) / 2
    return Plan(
        tokens=np.array(tokens).astype(np.int64),
        bounds=partition(tokens.size, ranks, token_cost, pair_cost),
        chunk=chunk,
        window=config.window,
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
    try:
        yield
    finally:
        _chain = held


def stop() -> None:
    """On rank 0: tell the other ranks to stop following, once (a lost connection meanwhile is
    no news: they are gone already)."""
    global _chain
    if _chain is None or not _chain.leads:
        return
    with suppress(RuntimeError):
        _chain.send(mx.array([STOP, 0], mx.int32), -1, "header")
    _chain = None


def follow(model: object) -> None:
    """A rank other than 0: run its slice of every chain step rank 0 starts, until it stops. A
    rank lost, stalled or out of step ends this process with one error line, as it ends every
    other rank's (lazymlx/distributed.py: fail)."""
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
            _Runner(LazyState(model), Plan.decode(encoded), None, None, None).run()
    except (RuntimeError, RankError) as error:
        distributed.fail(error)


def lazy_prompt_step(
    state: LazyState,
    tokens: mx.array,
    config: LazyConfig,
    chunk: int = PREFILL_CHUNK,
    progress: Progress | None = None,
    prune: bool = True,
) -> PromptResult:
    """Rank 0's prompt step: `prompt_step`'s result and context, the prompt run on the chain.

    A first prompt long enough runs on the chain; anything else (a later turn, a short prompt)
    runs here alone, as in one process. A progress callback that raises (a cancelled request)
    is obeyed once the chain has finished the step (the other ranks are mid-step): the step is
    then rolled back and the error raised. A rank lost or out of step ends this process with
    one error line (lazymlx/distributed.py: fail), as it ends every other rank's.
    """
    if _chain is None or not _chain.leads:
        return prompt_step(state, tokens, config, chunk, progress, prune)
    check_model(state)
    plan = plan_for(state, tokens, config, chunk, prune)
    if plan is None:
        return prompt_step(state, tokens, config, chunk, progress, prune)
    encoded = plan.encode()
    _chain.send(mx.array([STEP, encoded.size], mx.int32), -1, "header")
    _chain.send(encoded, -1, "header")
    runner = _Runner(state, plan, config, progress, prune)
    try:
        logits = runner.run()
    except BaseException as error:
        _roll_back(runner.step, 0)
        if isinstance(error, RuntimeError | RankError):  # a rank gone, or out of step
            distributed.fail(error)  # the chain can't go on: this rank's one line, and out
        raise
    if runner.cancelled is not None:
        _roll_back(runner.step, 0)
        raise runner.cancelled
    return PromptResult(logits, revived=0)  # a first prompt: nothing earlier to revive


class _Runner:
    """One rank's part of one chain step. Rank 0 (config given) also ranks, sends the keep
    decisions and ends with the whole context; the others keep nothing after the step."""

    def __init__(
        self,
        state: LazyState,
        plan: Plan,
        config: LazyConfig | None,
        progress: Progress | None,
        prune: bool | None,
    ) -> None:
        self.state, self.plan, self.progress = state, plan, progress
        self.chain = _chain
        self.leads = config is not None
        config = config or LazyConfig(window=plan.window)
        self.step = Step(state, config, plan.chunk, bool(prune), Ranker(config, 0))
        p = self.chain.position
        self.begin, self.end = plan.bounds[p], plan.bounds[p + 1]
        self.total = len(plan.tokens)
        self.carried = np.arange(self.total)  # every slice's tokens still going deeper
        tokens = mx.array(plan.tokens.astype(np.int32))
        own = mx.arange(self.begin, self.end, dtype=mx.int32)
        h = state.adapter.embed(tokens[None, self.begin : self.end])
        self.own = Carried(h, own, self.begin)  # this slice's tokens still going deeper
        self.slots: list[tuple[np.ndarray, mx.array]] = []  # own tokens pruned: Aux slots
        self.cancelled: BaseException | None = None
        if self.leads:
            state.aux.extend(tokens, depth=state.num_layers)
        self.chain.times, self.chain.traffic, self.chain.plan = [], Traffic(), plan

    def run(self) -> mx.array | None:
        """Every layer, then the gathering of Aux slots; rank 0's last-token logits."""
        out = None
        for layer in range(self.state.num_layers):
            out = self.layer(layer)
        self.gather()
        return self.state.adapter.logits(out[:, -1:]) if self.leads else None

    def layer(self, layer: int) -> mx.array:
        state, plan, chain = self.state, self.plan, self.chain
        cache, deepest = state[layer], layer == state.num_layers - 1
        deciding = layer in plan.decisions
        earlier = self.carried[self.carried < self.begin]
        if earlier.size:
            adapter = state.adapter
            shape = (1, adapter.num_kv_heads, earlier.size, adapter.head_dim)
            kv = chain.receive((2, *shape[1:]), state.dtype, layer, "kv")
            positions = chain.receive((earlier.size,), mx.int32, layer, "positions")
            if not np.array_equal(np.array(positions), earlier):
                raise RankError(
                    f"rank {chain.rank} expected the rows of positions {earlier[0]}..{earlier[-1]}"
                    f" ({earlier.size}) from rank {chain.previous} at layer {layer}, and got "
                    f"other rows: the ranks no longer agree on the prompt step"
                )
            cache.append(kv[None, 0], kv[None, 1], positions)
        seen = None
        if deciding and earlier.size:  # the last queries so far, for rank 0's ranking
            heads = (1, state.adapter.num_heads, min(plan.window, earlier.size))
            seen = chain.receive((*heads, state.adapter.head_dim), state.dtype, layer, "queries")
        started = time.perf_counter()
        if self.own.positions.size:
            out, observed = _layer(self.step, layer, self.own, forget=False)
            mx.eval(out)
        else:
            out, observed = self.own.h, None
        chain.times.append((layer, time.perf_counter() - started))
        cache.ends_at(self.total)
        if observed is not None and seen is not None:
            observed = mx.concatenate([seen, observed], axis=2)[:, :, -plan.window :]
        elif observed is None:
            observed = seen
        if not self.leads:
            keys, values = cache.fetch() if cache.rows else (None, None)
            if cache.rows:
                chain.send(mx.concatenate([keys, values]), layer, "kv")
                chain.send(cache.row_positions(), layer, "positions")
            if deciding and observed is not None:
                chain.send(observed, layer, "queries")
            state[layer].keys = state[layer].values = None  # forwarded: no longer needed here
        if self.leads:
            if state.record is not None:
                state.record.append((layer, self.carried.tolist()))
            self.report(layer)
        if deciding and not deepest:
            self.decide(layer, out, observed)
        else:
            self.own.h = out
        return out

    def report(self, layer: int) -> None:
        if self.progress is None or self.cancelled is not None:
            return
        try:
            layers = self.state.num_layers
            self.progress(self.total * (layer + 1) // layers, self.total)
        except BaseException as error:  # the chain is mid-step: finish it, then obey
            self.cancelled = error

    def decide(self, layer: int, out: mx.array, observed: mx.array | None) -> None:
        """The keep decision at a pruning layer: rank 0 ranks every carried token with the
        one-process rule and sends the mask on; every rank applies it."""
        chain, count = self.chain, self.carried.size
        if self.leads:
            mask = self.rank(layer, observed)
        else:
            mask = chain.receive((count,), mx.uint8, layer, "decision")
        if chain.next != 0:
            chain.send(mask, layer, "decision")
        kept = np.array(mask).astype(bool)
        mine = (self.carried >= self.begin) & (self.carried < self.end)
        own_kept = kept[mine]
        if not own_kept.all():
            dropped = np.flatnonzero(~own_kept)
            self.slots.append((self.carried[mine][dropped], out[0, mx.array(dropped)]))
            self.own.first = None
        going = mx.array(np.flatnonzero(own_kept).astype(np.int32))
        self.own.h, self.own.positions = out[:, going], self.own.positions[going]
        if self.leads and not kept.all():
            gone = mx.array(self.carried[~kept].astype(np.int32))
            self.state.aux.move(gone, layer + 1, None)
        self.carried = self.carried[kept]
        mx.eval(self.own.h, self.own.positions)

    def rank(self, layer: int, observed: mx.array) -> mx.array:
        """prefill._layers' ranking, over the rows this rank now holds (all of them)."""
        step, state, config = self.step, self.state, self.step.config
        count = self.carried.size
        sinks = min(config.keep_first, self.total)
        least = min(count, sinks + 1)
        ratio = state.pruning_layers(config)[layer]
        k = max(config.kept_count(ratio, count), least) if step.prune else count
        mask = np.ones(count, np.uint8)
        if k >= count:
            return mx.array(mask)
        cache, scale = state[layer], state.adapter.layers[layer].self_attn.scale
        scores = None

        def row_scores() -> mx.array:
            nonlocal scores
            if scores is None:
                scores = step.ranker.row_scores(observed, cache, scale)
            return scores

        kept, _ = _rank_own(step.ranker, layer, row_scores, count, sinks, k)
        mask[:] = 0
        mask[np.array(kept)] = 1
        return mx.array(mask)

    def gather(self) -> None:
        """The Aux slots of pruned tokens, slice by slice along the chain to rank 0, in position
        order."""
        state, chain = self.state, self.chain
        gone = np.setdiff1d(np.arange(self.total), self.carried)
        hidden = state.adapter.hidden_size
        before = gone[gone < self.begin]
        slots = chain.receive((before.size, hidden), state.dtype, -1, "slots")
        if self.slots:
            positions = np.concatenate([p for p, _ in self.slots])
            order = mx.array(np.argsort(positions).astype(np.int32))
            mine = mx.concatenate([h for _, h in self.slots])[order]
            slots = mx.concatenate([slots, mine]) if before.size else mine
        if not self.leads:
            chain.send(slots, -1, "slots")
            return
        aux = state.aux
        if gone.size:
            aux.make_slots(hidden, state.dtype)
            aux.hidden[mx.array(gone.astype(np.int32))] = slots
        mx.eval(aux.ids, aux.depth, *([] if aux.hidden is None else [aux.hidden]))
