"""One rank's part of a context-parallel prompt step: the prefill's layer loop on the chain.

The loop is the engine's own (lazymlx/engine/prefill.py: `run_layers`, with its ranking, record
and progress); `ChainLane` supplies what the chain does differently at each layer. A rank
projects its own tokens, takes the earlier slices' rows off the chain, and posts them with its
own to the next rank before it attends, so the next rank's layer runs beside this one's
attention and MLP (KV-Runahead's overlap); rank 0 ranks a pruning layer as soon as every key and
the last queries are there, before its own attention, since the ranking reads nothing else. The
posted message is waited for once the compute is done (lazymlx/parallel/chain.py: one message
in flight). After the last layer the other ranks send rank 0 the Aux slots of the tokens they
pruned, so rank 0's LazyState is the one one process builds.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from lazymlx.engine.blocks import append_kv, attend
from lazymlx.engine.cache import LazyKVCache, LazyState
from lazymlx.engine.config import LazyConfig
from lazymlx.engine.policy import Phase
from lazymlx.engine.prefill import Carried, Lane, Progress, Ranker, Scores, Step
from lazymlx.errors import RankError
from lazymlx.parallel import distributed
from lazymlx.parallel.chain import Chain, Plan, Posted, Traffic, pack, unpack


@dataclass
class Chunk:
    """A chunk of this slice's tokens projected at a layer: its input, its queries, and how many
    of the slice's rows (its own included) it may attend to."""

    x: mx.array
    queries: mx.array
    rows: int


class ChainLane(Lane):
    """One rank's lane of one chain step (its `step`). Rank 0 also ranks, sends the keep
    decisions and ends with the whole context; the others keep nothing after the step."""

    def __init__(self, chain: Chain, step: Step, plan: Plan) -> None:
        state = step.state
        self.chain, self.step, self.state, self.plan = chain, step, state, plan
        self.leads = self.ranks = chain.leads
        p = chain.position
        self.begin, self.slice_end = plan.bounds[p], plan.bounds[p + 1]  # this rank's slice
        self.start, self.end = 0, len(plan.tokens)  # the step's (a first prompt)
        self.carried = np.arange(self.end)  # every slice's tokens still going deeper
        tokens = mx.array(plan.tokens.astype(np.int32))
        own = mx.arange(self.begin, self.slice_end, dtype=mx.int32)
        h = state.adapter.embed(tokens[None, self.begin : self.slice_end])
        self.mine = Carried(h, own, self.begin)  # this slice's tokens still going deeper
        self.slots: list[tuple[np.ndarray, mx.array]] = []  # own tokens pruned: Aux slots
        self.cancelled: BaseException | None = None
        # the layer in progress: its chunks, last queries, output, time and keep decision
        self.chunks: list[Chunk] = []
        self.observed: mx.array | None = None
        self.out: mx.array | None = None
        self.projecting, self.deciding = 0.0, False
        self.mask: mx.array | None = None
        if self.ranks:
            state.aux.extend(tokens, depth=state.num_layers)
        chain.times, chain.traffic, chain.plan = [], Traffic(), plan

    def decides(self, layer: int) -> bool:
        return layer in self.plan.decisions

    def reach(self, layer: int, deciding: bool) -> mx.array | None:
        """Project this slice's tokens and take the earlier rows: every key of the layer here,
        and the last queries so far."""
        state, plan = self.state, self.plan
        self.deciding = deciding
        earlier = self.carried[self.carried < self.begin]
        started = time.perf_counter()
        self.chunks, own_kv, observed = self.project(layer)
        self.projecting = time.perf_counter() - started
        seen = self.take(layer, earlier, deciding)
        if own_kv is not None:
            state[layer].append(own_kv[None, 0], own_kv[None, 1], self.mine.positions)
        if observed is not None and seen is not None:
            observed = mx.concatenate([seen, observed], axis=2)[:, :, -plan.window :]
        elif observed is None:
            observed = seen
        self.observed = observed
        return observed

    def own(self) -> int:
        return self.carried.size

    def attend(self, layer: int, cut: tuple[mx.array, mx.array] | None) -> None:
        """Attend and run the MLP while this layer's message travels (rank 0's keep decision,
        a follower's rows), then wait for it."""
        chain, deepest = self.chain, layer == self.state.num_layers - 1
        self.mask = self.keep_mask(cut) if self.leads and self.deciding else None
        out = self.attend_chunks(layer, deepest)  # built here, run below
        posted = self.forward(layer)
        started = time.perf_counter()
        mx.eval(out)  # the posted message travels meanwhile
        chain.times.append((layer, self.projecting + time.perf_counter() - started))
        chain.wait(posted)
        self.out = out
        if not self.deciding:
            self.mine.h = out

    def positions(self) -> list[int]:
        return self.carried.tolist()

    def finish(self) -> mx.array | None:
        """The gathering of Aux slots; rank 0's last-token logits."""
        self.gather()
        return self.state.adapter.logits(self.out[:, -1:]) if self.leads else None

    @classmethod
    def following(cls, chain: Chain, state: LazyState, plan: Plan) -> ChainLane:
        """A rank other than 0's lane for the step `plan` describes: it ranks nothing (the plan
        says how many last queries it forwards), so its step's config is a placeholder."""
        config = LazyConfig()
        return cls(chain, Step(state, config, plan.chunk, Phase(False), Ranker(config, 0)), plan)

    def failed(self, error: BaseException) -> None:
        """A rank gone, or out of step: the chain can't go on, so this rank's one line, and out
        (lazymlx/parallel/distributed.py: fail)."""
        if isinstance(error, RuntimeError | RankError):
            distributed.fail(error)

    def reporting(self, progress: Progress | None) -> Progress | None:
        """Rank 0's `progress`, what it raises kept for later: the chain is mid-step, so it
        finishes the step first, then obeys (`cancelled`)."""
        if progress is None:
            return None

        def report(done: int, total: int) -> None:
            if self.cancelled is None:
                try:
                    progress(done, total)
                except BaseException as error:
                    self.cancelled = error

        return report

    def project(self, layer: int) -> tuple[list[Chunk], mx.array | None, mx.array | None]:
        """This slice's tokens at `layer` projected, chunk by chunk as the engine's `_layer`
        cuts them: the chunks (input, queries, own rows up to its end); the own keys and values
        stacked (2, kv heads, tokens, head dim); the last `window` queries. They need nothing
        from the other ranks, so they run first, beside the wait for the earlier rows."""
        own, adapter = self.mine, self.state.adapter
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

    def attend_chunks(self, layer: int, deepest: bool) -> mx.array:
        """The slice's projected tokens attend over every row they may see (the cache's rows up
        to each chunk's last, as `block_forward` fetches them) and run the MLP, unevaluated; at
        the deepest layer only rank 0's last token, the one output read (the others none)."""
        chunks = self.chunks
        if not chunks or (deepest and not self.leads):
            return self.mine.h
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

    def forward(self, layer: int) -> Posted | None:
        """Post this layer's message to the next rank: a follower's rows (positions, keys and
        values; the last queries at a pruning layer) as one, rank 0's keep decision. Evaluated
        first, so the send waits on nothing the compute stream runs after it."""
        chain, cache, mask = self.chain, self.state[layer], self.mask
        if self.leads:
            if mask is None:
                return None
            mx.eval(mask)
            return chain.post(mask, layer, "decision")
        if not cache.rows:
            return None
        keys, values = cache.fetch()
        parts = [cache.row_positions(), mx.concatenate([keys, values])]
        if self.deciding:
            parts.append(self.observed)
        message = pack(*parts)
        mx.eval(message)
        cache.keys = cache.values = None  # forwarded: the attention holds what it reads
        return chain.post(message, layer, "kv")

    def keep_mask(self, cut: tuple[mx.array, mx.array] | None) -> mx.array:
        """Rank 0's cut (prefill's, over every row of the layer, all here) as the keep mask the
        other ranks receive: a byte per carried token."""
        mask = np.ones(self.carried.size, np.uint8)
        if cut is not None:
            mask[:] = 0
            mask[np.array(cut[0])] = 1
        return mx.array(mask)

    def apply(self, layer: int, cut: tuple[mx.array, mx.array] | None, scores: Scores) -> None:
        """The keep decision at a pruning layer: rank 0 has ranked every carried token with the
        one-process rule and sent the mask on; every other rank receives it and passes it on;
        every rank applies it."""
        chain, count, out, mask = self.chain, self.carried.size, self.out, self.mask
        if mask is None:
            mask = chain.receive((count,), mx.uint8, layer, "decision")
            if chain.next != 0:
                chain.send(mask, layer, "decision")
        kept = np.array(mask).astype(bool)
        mine = (self.carried >= self.begin) & (self.carried < self.slice_end)
        own_kept = kept[mine]
        if not own_kept.all():
            dropped = np.flatnonzero(~own_kept)
            self.slots.append((self.carried[mine][dropped], out[0, mx.array(dropped)]))
            self.mine.first = None
        going = mx.array(np.flatnonzero(own_kept).astype(np.int32))
        self.mine.h, self.mine.positions = out[:, going], self.mine.positions[going]
        if self.leads and not kept.all():
            gone = mx.array(self.carried[~kept].astype(np.int32))
            self.state.aux.move(gone, layer + 1, None)
        self.carried = self.carried[kept]
        mx.eval(self.mine.h, self.mine.positions)

    def gather(self) -> None:
        """The Aux slots of pruned tokens, slice by slice along the chain to rank 0, in position
        order."""
        state, chain = self.state, self.chain
        gone = np.setdiff1d(np.arange(self.end), self.carried)
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
