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
lazymlx/parallel/chain.py's; the slices' costs lazymlx/parallel/costs.py's.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import cache as cache_once  # the window's attention, computed on first use

import mlx.core as mx
import numpy as np

from lazymlx.engine import hooks
from lazymlx.engine.blocks import append_kv, attend, attention_scores
from lazymlx.engine.cache import LazyKVCache, LazyState
from lazymlx.engine.config import LazyConfig
from lazymlx.engine.policy import Phase
from lazymlx.engine.prefill import (
    PREFILL_CHUNK,
    Carried,
    Progress,
    PromptResult,
    Ranker,
    Step,
    cut_own,
    observed_queries,
    prompt_step,
    roll_back,
)
from lazymlx.errors import LazymlxError, RankError
from lazymlx.parallel import distributed
from lazymlx.parallel.chain import Chain, Plan, Posted, Traffic, pack, unpack
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
        hooks.set_first_prompt_step(lazy_prompt_step)


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
    hooks.set_first_prompt_step(None)
    try:
        yield
    finally:
        _chain = held
        hooks.set_first_prompt_step(lazy_prompt_step)


def stop() -> None:
    """On rank 0: tell the other ranks to stop following, once (a lost connection meanwhile is
    no news: they are gone already)."""
    global _chain
    if _chain is None or not _chain.leads:
        return
    with suppress(RuntimeError):
        _chain.send(mx.array([STOP, 0], mx.int32), -1, "header")
    _chain = None
    hooks.set_first_prompt_step(None)


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
    tail: int = 0,
    asked: int = 0,
) -> PromptResult:
    """Rank 0's prompt step: `prompt_step`'s result and context, the prompt run on the chain.

    A first prompt long enough runs on the chain; anything else (a later turn, a short prompt)
    runs here alone, as in one process. A progress callback that raises (a cancelled request)
    is obeyed once the chain has finished the step (the other ranks are mid-step): the step is
    then rolled back and the error raised. A rank lost or out of step ends this process with
    one error line (lazymlx/parallel/distributed.py: fail), as it ends every other rank's.
    """
    if _chain is None or not _chain.leads:
        return prompt_step(state, tokens, config, chunk, progress, prune, tail, asked)
    check_model(state)
    plan = plan_for(state, tokens, config, chunk, prune, tail, asked)
    if plan is None:
        return prompt_step(state, tokens, config, chunk, progress, prune, tail, asked)
    encoded = plan.encode()
    _chain.send(mx.array([STEP, encoded.size], mx.int32), -1, "header")
    _chain.send(encoded, -1, "header")
    runner = _Runner(state, plan, config, progress, prune, tail, asked)
    try:
        logits = runner.run()
    except BaseException as error:
        roll_back(runner.step, 0)
        if isinstance(error, RuntimeError | RankError):  # a rank gone, or out of step
            distributed.fail(error)  # the chain can't go on: this rank's one line, and out
        raise
    if runner.cancelled is not None:
        roll_back(runner.step, 0)
        raise runner.cancelled
    how = runner.step.phase.said(state.num_layers, bool(config.point))
    return PromptResult(logits, 0, how)  # a first prompt: nothing earlier to revive


@dataclass
class Chunk:
    """A chunk of this slice's tokens projected at a layer: its input, its queries, and how many
    of the slice's rows (its own included) it may attend to."""

    x: mx.array
    queries: mx.array
    rows: int


class _Runner:
    """One rank's part of one chain step. Rank 0 (config given) also ranks, sends the keep
    decisions and ends with the whole context; the others keep nothing after the step.

    At each layer a rank projects its own tokens, takes the earlier slices' rows off the chain,
    and posts them with its own to the next rank before it attends, so the next rank's layer
    runs beside this one's attention and MLP (KV-Runahead's overlap); rank 0 ranks a pruning
    layer as soon as every key and the last queries are there, before its own attention, since
    the ranking reads nothing else. The posted message is waited for once the compute is done.
    """

    def __init__(
        self,
        state: LazyState,
        plan: Plan,
        config: LazyConfig | None,
        progress: Progress | None,
        prune: bool | None,
        tail: int = 0,
        asked: int = 0,
    ) -> None:
        self.state, self.plan, self.progress = state, plan, progress
        self.chain = _chain
        self.leads = config is not None
        config = config or LazyConfig(window=plan.window)
        ranker = Ranker(config, 0)
        self.step = Step(state, config, plan.chunk, Phase(bool(prune)), ranker, tail, asked)
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
        """One layer of this rank's slice: project, take the earlier rows, forward them with
        its own (rank 0: rank a pruning layer and send the decision), attend and run the MLP
        while that message travels, then wait for it and apply a keep decision."""
        state, plan, chain = self.state, self.plan, self.chain
        deepest = layer == state.num_layers - 1
        deciding = layer in plan.decisions and not deepest
        earlier = self.carried[self.carried < self.begin]
        started = time.perf_counter()
        chunks, own_kv, observed = self.project(layer)
        projecting = time.perf_counter() - started
        seen = self.take(layer, earlier, deciding)
        cache = state[layer]
        if own_kv is not None:
            cache.append(own_kv[None, 0], own_kv[None, 1], self.own.positions)
        if observed is not None and seen is not None:
            observed = mx.concatenate([seen, observed], axis=2)[:, :, -plan.window :]
        elif observed is None:
            observed = seen
        mask = self.rank(layer, observed) if self.leads and deciding else None
        out = self.attend(layer, chunks, deepest)  # built here, run below
        posted = self.forward(layer, deciding, observed, mask)
        started = time.perf_counter()
        mx.eval(out)  # the posted message travels meanwhile
        chain.times.append((layer, projecting + time.perf_counter() - started))
        chain.wait(posted)
        cache.ends_at(self.total)
        if self.leads:
            if state.record is not None:
                state.record.append((layer, self.carried.tolist()))
            self.report(layer)
        if deciding:
            self.decide(layer, out, mask)
        else:
            self.own.h = out
        return out

    def project(self, layer: int) -> tuple[list[Chunk], mx.array | None, mx.array | None]:
        """This slice's tokens at `layer` projected, chunk by chunk as the engine's `_layer`
        cuts them: the chunks (input, queries, own rows up to its end); the own keys and values
        stacked (2, kv heads, tokens, head dim); the last `window` queries. They need nothing
        from the other ranks, so they run first, beside the wait for the earlier rows."""
        own, adapter = self.own, self.state.adapter
        count, chunk, window = own.positions.size, self.plan.chunk, self.plan.window
        if not count:
            return [], None, None
        block, scratch = adapter.layers[layer], LazyKVCache()
        chunks, observed = [], None
        for begin in range(0, count, chunk):
            x, at = own.h[:, begin : begin + chunk], own.positions[begin : begin + chunk]
            run = None if own.first is None else own.first + begin
            queries = append_kv(adapter, block, scratch, x, at, run)
            chunks.append(Chunk(x, queries, scratch.rows))
            last = queries[:, :, -window:]
            observed = last if observed is None else mx.concatenate([observed, last], axis=2)
            observed = observed[:, :, -window:]
        keys, values = scratch.fetch()
        own_kv = mx.concatenate([keys, values])
        mx.async_eval(own_kv, observed, *(c.queries for c in chunks))
        return chunks, own_kv, observed

    def take(self, layer: int, earlier: np.ndarray, deciding: bool) -> mx.array | None:
        """The earlier slices' rows of `layer` off the chain, into the cache, their positions
        checked; at a pruning layer the last queries so far too (for rank 0's ranking)."""
        if not earlier.size:
            return None
        state, chain, adapter = self.state, self.chain, self.state.adapter
        parts = [((earlier.size,), mx.int32)]
        parts += [((2, adapter.num_kv_heads, earlier.size, adapter.head_dim), state.dtype)]
        if deciding:
            window = min(self.plan.window, earlier.size)
            parts += [((1, adapter.num_heads, window, adapter.head_dim), state.dtype)]
        size = sum(math.prod(shape) * dtype.size for shape, dtype in parts)
        positions, kv, *seen = unpack(chain.receive((size,), mx.uint8, layer, "kv"), parts)
        if not np.array_equal(np.array(positions), earlier):
            raise RankError(
                f"rank {chain.rank} expected the rows of positions {earlier[0]}..{earlier[-1]}"
                f" ({earlier.size}) from rank {chain.previous} at layer {layer}, and got "
                f"other rows: the ranks no longer agree on the prompt step"
            )
        state[layer].append(kv[None, 0], kv[None, 1], positions)
        return seen[0] if seen else None

    def attend(self, layer: int, chunks: list[Chunk], deepest: bool) -> mx.array:
        """The slice's projected tokens attend over every row they may see (the cache's rows up
        to each chunk's last, as `block_forward` fetches them) and run the MLP, unevaluated; at
        the deepest layer only rank 0's last token, the one output read (the others none)."""
        if not chunks or (deepest and not self.leads):
            return self.own.h
        adapter, cache = self.state.adapter, self.state[layer]
        block = adapter.layers[layer]
        keys, values = cache.fetch()
        before = cache.rows - chunks[-1].rows  # the earlier slices' rows
        outputs = []
        for chunk in chunks[-1:] if deepest else chunks:
            x, queries = chunk.x, chunk.queries
            mask = "causal" if x.shape[1] > 1 else None
            if deepest:
                x, queries, mask = x[:, -1:], queries[:, :, -1:], None
            rows = before + chunk.rows
            out = attend(
                queries, keys[..., :rows, :], values[..., :rows, :], block.self_attn.scale, mask
            )
            attended = block.self_attn.o_proj(out.transpose(0, 2, 1, 3).reshape(*x.shape[:2], -1))
            outputs.append(adapter.finish_block(block, x, attended))
        return outputs[0] if len(outputs) == 1 else mx.concatenate(outputs, axis=1)

    def forward(
        self, layer: int, deciding: bool, observed: mx.array | None, mask: mx.array | None
    ) -> Posted | None:
        """Post this layer's message to the next rank: a follower's rows (positions, keys and
        values; the last queries at a pruning layer) as one, rank 0's keep decision. Evaluated
        first, so the send waits on nothing the compute stream runs after it."""
        chain, cache = self.chain, self.state[layer]
        if self.leads:
            if mask is None:
                return None
            mx.eval(mask)
            return chain.post(mask, layer, "decision")
        if not cache.rows:
            return None
        keys, values = cache.fetch()
        parts = [cache.row_positions(), mx.concatenate([keys, values])]
        if deciding:
            parts.append(observed)
        message = pack(*parts)
        mx.eval(message)
        cache.keys = cache.values = None  # forwarded: the attention holds what it reads
        return chain.post(message, layer, "kv")

    def report(self, layer: int) -> None:
        if self.progress is None or self.cancelled is not None:
            return
        try:
            layers = self.state.num_layers
            self.progress(self.total * (layer + 1) // layers, self.total)
        except BaseException as error:  # the chain is mid-step: finish it, then obey
            self.cancelled = error

    def decide(self, layer: int, out: mx.array, mask: mx.array | None) -> None:
        """The keep decision at a pruning layer: rank 0 has ranked every carried token with the
        one-process rule and sent the mask on; every other rank receives it and passes it on;
        every rank applies it."""
        chain, count = self.chain, self.carried.size
        if mask is None:
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
        """prefill's cut, over the rows this rank now holds (all of them): the keep mask."""
        step, state = self.step, self.state
        count = self.carried.size
        sinks = min(step.config.keep_first, self.total)
        ratio = state.pruning_layers(step.config)[layer]
        cache, scale = state[layer], state.adapter.layers[layer].self_attn.scale
        probs = cache_once(lambda: step.ranker.row_probs(observed, cache, scale))
        scores = cache_once(lambda: attention_scores(probs()[:, :, -step.ranking :]))
        firsts = state.first_cuts(step.config)
        cut = cut_own(step, layer, ratio, firsts, scores, probs, count, sinks)
        mask = np.ones(count, np.uint8)
        if cut is not None:
            mask[:] = 0
            mask[np.array(cut[0])] = 1
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
