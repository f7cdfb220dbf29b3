"""The lazy prompt step: a prompt (or a new chat turn) run layer-major over the lazy context.

Pruning needs the last token's attention at each pruning layer before the deeper layers run, so
the step goes layer by layer; inside a layer the tokens go in chunks (mlx-lm's prefill step size),
at most two in flight, so activations and attention scores stay near stock mlx-lm's.
At a pruning layer the attention the step's last tokens pay there ranks two kinds of token:
- the step's own tokens, ranked among themselves by the schedule (unless the step is short and
  runs whole); the dropped ones save their hidden state to their Aux slot and stop there;
- context tokens an earlier step pruned at this very layer (they have KV here and none deeper):
  the ones a prune of the whole context would keep (ranked with every row present, at the
  layer's keep count) resume from their Aux slot and go deeper with the step, as LazyLLM's
  Aux cache intends. A document kept on its own was pruned by its own last tokens, which knew
  nothing of the question to come; the question's step is where it comes back.
Each (token, layer) pair is still computed at most once. Own tokens' rows come after every row
cached, so MLX's "causal" mask is exact for them; revived tokens sit at earlier positions among
rows already cached, so they get an explicit mask on positions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache as cache_once  # the row scores, computed on first use only

import mlx.core as mx
import numpy as np

from lazymlx.engine import hooks, policy
from lazymlx.engine.blocks import (
    append_kv,
    attention_mask,
    attention_peak,
    attention_probs,
    attention_scores,
    block_forward,
)
from lazymlx.engine.cache import LazyKVCache, LazyState, causal_mask
from lazymlx.engine.config import LazyConfig
from lazymlx.engine.policy import Phase

PREFILL_CHUNK = 2048  # mlx-lm's default prefill_step_size


class Ranker:
    """Scores at a pruning layer; higher scores go deeper.

    "attention" is LazyLLM's rule, widened by the config: the attention the step's last `window`
    tokens pay at this very layer, averaged over heads, then pooled: each token scores the best
    of the `pool` tokens before it. "static" scores once, at the step's first pruning layer, and
    ranks deeper layers by those same scores (the paper's one-shot pruning); "random" draws
    scores from a key seeded by the step's start and the layer, so a run repeats.
    """

    def __init__(self, config: LazyConfig, start: int) -> None:
        self.config, self.start = config, start
        self.fixed: mx.array | None = None  # static: the first pruning layer's scores

    def shape_rows(self, scores: mx.array, row_positions: mx.array) -> mx.array:
        """Scores of a layer's rows (at `row_positions`, in cache order) pooled in text order,
        so a chosen token takes its neighbours along whichever step left them at the layer; in
        cache order, fp32."""
        order = mx.argsort(row_positions)
        shaped = mx.zeros(scores.shape, mx.float32)
        shaped[order] = _pooled(scores[order], self.config.pool).astype(mx.float32)
        return shaped

    def row_probs(self, observed: mx.array, cache: LazyKVCache, scale: float) -> mx.array:
        """The attention the observing tokens (the layer's last rows) pay every row of it."""
        row_positions, window = cache.row_positions(), observed.shape[2]
        mask = None if window == 1 else causal_mask(row_positions, row_positions[-window:])
        return attention_probs(observed, cache.fetch()[0], scale, mask)

    def own(self, layer: int, row_scores: Callable[[], mx.array], count: int) -> mx.array:
        """Pooled scores of the step's own `count` tokens (the layer's last rows); row_scores()
        gives every row's, computed on first use."""
        config = self.config
        if config.selection == "random":
            key = mx.random.key(self.start * 101 + layer)
            return mx.random.uniform(shape=(count,), key=key)
        if self.fixed is None:
            scores = row_scores()[-count:]
            if config.selection != "static":
                return _pooled(scores, config.pool)
            self.fixed = scores
        return _pooled(self.fixed, config.pool)

    def narrow(self, kept: mx.array) -> None:
        """Static scores follow the own tokens that go on (their indices, `kept`)."""
        if self.fixed is not None:
            self.fixed = self.fixed[kept]


@dataclass
class Step:
    """What a prompt step keeps from layer to layer (phase: whether its own tokens are pruned,
    whether its first cut has fallen), and what it changed in earlier tokens' Aux entries, so an
    interrupted step can put them back: `revivals` holds (positions, their depth before, their
    Aux slots before), in order. tail: how many of its last tokens are the chat template's
    closing ones, observed beside the window's (with `past_template`) but never pointing;
    asked: how many before them are the user's question (0: not known), whose queries say
    where it points (with `point`)."""

    state: LazyState
    config: LazyConfig
    chunk: int
    phase: Phase
    ranker: Ranker
    tail: int = 0
    asked: int = 0
    revivals: list[tuple[mx.array, int, mx.array]] = field(default_factory=list)
    running: list[mx.array] = field(default_factory=list)  # the evaluation still in flight

    def evaluate(self, *arrays: mx.array) -> None:
        """Start evaluating the arrays and wait for the previous call's: the device runs one
        chunk while the host builds the next (a wait after each would leave it idle meanwhile),
        and never more than two are in flight, so memory stays near stock's."""
        mx.async_eval(*arrays)
        mx.eval(*self.running)
        self.running = list(arrays)

    @property
    def ranking(self) -> int:
        """The last tokens whose queries rank: the config's window, and the template's tail."""
        return ranking_queries(self.config, self.tail)

    @property
    def asking(self) -> int:
        """The tokens whose queries say where the step points (before the tail): its question,
        else the config's window; none without `point`."""
        return asking_queries(self.config, self.asked)

    @property
    def window(self) -> int:
        """The last tokens whose queries each layer keeps (observed_queries)."""
        return observed_queries(self.config, self.tail, self.asked)

    def revive(self, positions: mx.array, depth: int) -> mx.array:
        """Note the tokens' entries before they resume; their Aux slots (their input now)."""
        slots = self.state.aux.hidden[positions]
        mx.eval(slots)
        self.revivals.append((positions, depth, slots))
        return slots


def ranking_queries(config: LazyConfig, tail: int) -> int:
    return config.window + (tail if config.past_template else 0)


def asking_queries(config: LazyConfig, asked: int) -> int:
    return (asked or config.window) if config.point else 0


def observed_queries(config: LazyConfig, tail: int, asked: int) -> int:
    """The last tokens of a step whose queries each layer keeps: those that rank (the window,
    and the tail past the template) and, with `point`, those that point (the question, or the
    window) with the tail after them."""
    asking = asking_queries(config, asked)
    return max(ranking_queries(config, tail), asking + tail if asking else 0)


Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class PromptResult:
    """What a prompt step computed: the last token's logits (1, 1, vocab), how many earlier
    tokens (pruned by an earlier step) it brought back, and why it pruned what it did."""

    logits: mx.array
    revived: int
    how: str = ""


def prompt_step(
    state: LazyState,
    tokens: mx.array,
    config: LazyConfig,
    chunk: int = PREFILL_CHUNK,
    progress: Progress | None = None,
    prune: bool = True,
    tail: int = 0,
    asked: int = 0,
) -> PromptResult:
    """Run `tokens` over the context, pruning by the config; what it computed.

    prune: whether the step's own tokens are pruned; a short step runs whole but still revives
    the context tokens it needs. tail: how many of the tokens are the chat template's closing
    ones, asked: how many before them the user's question (lazymlx/engine/templates.py). progress(done, total) is called as each layer's last chunk
    runs, `done` being the share of the step's tokens whose layers are done or running
    (layer-major, so it climbs by a layer's worth); it may raise to cancel. An interrupted step (Ctrl-C in a long prefill, a cancelled
    request) leaves the context as it was before it.
    """
    start = state.offset
    step = Step(state, config, chunk, Phase(prune), Ranker(config, start), tail, asked)
    lanes = hooks.first_prompt_lane() if start == 0 else None
    lane = lanes(step, tokens) if lanes is not None else None  # a chain's rank 0: the chain
    try:
        lane = lane or Alone(step, tokens)
        logits = run_layers(step, lane, lane.reporting(progress))
    except BaseException as error:
        roll_back(step, start)
        if lane is not None:
            lane.failed(error)
        raise
    if lane.cancelled is not None:  # a progress that raised, obeyed once the lane could
        roll_back(step, start)
        raise lane.cancelled
    revived = sum(positions.size for positions, _, _ in step.revivals)
    how = step.phase.said(state.num_layers, bool(config.point))
    return PromptResult(logits, revived, how)


def roll_back(step: Step, start: int) -> None:
    """Drop every row the step added (its own tokens', and revived tokens' from the layer they
    resumed at; a sliding window may have dropped older rows meanwhile, so by position, not by
    count) and put the revived tokens' Aux entries back."""
    state = step.state
    for layer, cache in enumerate(state.layers):
        if cache.rows:
            row_positions = np.array(cache.row_positions())
            added = row_positions >= start
            for positions, depth, _ in step.revivals:
                if layer >= depth:
                    added |= np.isin(row_positions, np.array(positions))
            if added.any():
                cache.keep_rows(np.flatnonzero(~added))
        cache.ends_at(start)
    for positions, depth, slots in reversed(step.revivals):
        state.aux.move(positions, depth, None, slots)
    state.aux.trim(state.aux.length - start)


@dataclass
class Carried:
    """What a prompt step carries from one layer to the next: the tokens still going deeper.

    h (1, n, hidden) and positions: the revived context tokens first (`revived` of them,
    positions ascending), then the step's own; first: the own tokens' first position while
    they are one unbroken run (rope then takes one offset), else None.
    """

    h: mx.array
    positions: mx.array
    first: int | None
    revived: int = 0


Scores = Callable[[], mx.array] | None  # the window's attention, computed on first use


class Lane:
    """How a prompt step's layers run where it runs: `run_layers`, the one layer loop, asks a
    lane at each layer to run it as far as the ranking reads (`reach`), ranks there itself, then
    has the lane finish the layer (`attend`) and apply the cut (`apply`). One process runs the
    whole layer in `reach` (`Alone`); the context-parallel chain (lazymlx/parallel/) projects
    its slice and takes the earlier slices' rows there, attends once the keep decision is on
    its way, and applies the one rank 0 sent. start, end: the step's positions; ranks: whether
    this process ranks (on the chain rank 0 alone)."""

    start: int
    end: int
    ranks: bool = True
    cancelled: BaseException | None = None  # what a progress call raised, kept till the end

    def reporting(self, progress: Progress | None) -> Progress | None:
        """The progress callback the loop calls: `progress` itself, so it may raise to cancel."""
        return progress

    def failed(self, error: BaseException) -> None:
        """After the step has been rolled back on `error` (which is raised next)."""

    def decides(self, layer: int) -> bool:
        """Whether the step may cut its tokens at `layer` (the loop then ranks and applies)."""
        raise NotImplementedError

    def reach(self, layer: int, deciding: bool) -> mx.array | None:
        """Run `layer` until the ranking can read it: every key of it in the cache, and the
        step's last `window` queries (returned)."""
        raise NotImplementedError

    def own(self) -> int:
        """How many of the step's own tokens go on into the layer (the layer's last rows)."""
        raise NotImplementedError

    def attend(self, layer: int, cut: tuple[mx.array, mx.array] | None) -> None:
        """The rest of `layer` once the cut is known (None: all go on, or not this lane's)."""

    def positions(self) -> list[int]:
        """The positions computed at the layer just run (the state's record)."""
        raise NotImplementedError

    def apply(self, layer: int, cut: tuple[mx.array, mx.array] | None, scores: Scores) -> None:
        """The cut at a deciding layer (scores: the window's attention, None where this process
        does not rank): the tokens it drops stop there."""
        raise NotImplementedError

    def finish(self) -> mx.array | None:
        """After the last layer: the step's last-token logits (None where another process
        holds them)."""
        raise NotImplementedError


def run_layers(step: Step, lane: Lane, progress: Progress | None = None) -> mx.array | None:
    """The prompt step's one layer loop, over a lane (in one process or on the chain): each
    layer reached, ranked where it decides (the cut: `cut_at`), finished, recorded, reported
    to `progress` and cut; the lane's logits."""
    state, config = step.state, step.config
    ratios, firsts = state.pruning_layers(config), state.first_cuts(config)
    total = lane.end - lane.start
    sinks = max(0, min(config.keep_first, lane.end) - lane.start)  # never pruned: first own
    for layer in range(state.num_layers):
        deciding = lane.decides(layer)
        observed = lane.reach(layer, deciding)
        state[layer].ends_at(lane.end)
        cut, scores = None, None
        if deciding and lane.ranks:
            cut, scores = cut_at(step, layer, ratios[layer], firsts, observed, lane.own(), sinks)
        lane.attend(layer, cut)
        if state.record is not None:
            state.record.append((layer, lane.positions()))
        if progress is not None:
            progress(total * (layer + 1) // state.num_layers, total)
        if deciding:
            lane.apply(layer, cut, scores)
    return lane.finish()


def cut_at(
    step: Step,
    layer: int,
    ratio: float,
    firsts: list[int],
    observed: mx.array,
    own: int,
    sinks: int,
) -> tuple[tuple[mx.array, mx.array] | None, Callable[[], mx.array]]:
    """`cut_own` at a deciding layer whose keys are all in the cache, ranked by the `observed`
    queries; and the window's attention on the layer's rows, computed on first use."""
    cache, scale = step.state[layer], step.state.adapter.layers[layer].self_attn.scale
    probs = cache_once(lambda: step.ranker.row_probs(observed, cache, scale))
    scores = cache_once(lambda: attention_scores(probs()[:, :, -step.ranking :]))
    return cut_own(step, layer, ratio, firsts, scores, probs, own, sinks), scores


class Alone(Lane):
    """One process's lane: every layer whole (`_layer`), then the cut of the step's own tokens
    and the revival of context tokens an earlier step pruned there."""

    def __init__(self, step: Step, tokens: mx.array) -> None:
        state, config = step.state, step.config
        self.step, self.ratios = step, state.pruning_layers(config)
        self.start, self.end = state.offset, state.offset + tokens.size
        # earlier tokens per depth: those at depth l + 1 were pruned at layer l and wait there
        self.waiting = None
        if self.start and config.prompt_revive:
            self.waiting = state.aux.counts(state.num_layers)
        state.aux.extend(tokens, depth=state.num_layers)
        positions = mx.arange(self.start, self.end, dtype=mx.int32)
        self.carried = Carried(state.adapter.embed(tokens[None]), positions, self.start)

    def decides(self, layer: int) -> bool:
        return layer in self.ratios and layer < self.step.state.num_layers - 1

    def reach(self, layer: int, deciding: bool) -> mx.array | None:
        forget = layer not in self.ratios
        self.carried.h, observed = _layer(self.step, layer, self.carried, forget)
        return observed

    def own(self) -> int:
        return self.carried.positions.size - self.carried.revived

    def positions(self) -> list[int]:
        return self.carried.positions.tolist()

    def apply(self, layer: int, cut: tuple[mx.array, mx.array] | None, scores: Scores) -> None:
        step, carried, own = self.step, self.carried, self.own()
        state, aux = step.state, step.state.aux
        own_h, own_positions = carried.h[:, carried.revived :], carried.positions[carried.revived :]
        backlog = self.waiting is not None and self.waiting[layer + 1] > 0
        if cut is None and not carried.revived and not backlog:
            return
        aux.make_slots(state.adapter.hidden_size, state.dtype)
        kept, dropped = cut or (mx.arange(own), mx.arange(0))
        aux.move(own_positions[dropped], layer + 1, None, own_h[0, dropped])  # they stop here
        back_h, back = carried.h[:, : carried.revived], carried.positions[: carried.revived]
        if carried.revived or backlog:  # context tokens: what a prune of the whole context keeps
            back_h, back = _revive(step, layer, scores(), carried)
        self.carried = Carried(
            mx.concatenate([back_h, own_h[:, kept]], axis=1),
            mx.concatenate([back, own_positions[kept]]),
            carried.first if kept.size == own else None,
            back.size,
        )
        step.evaluate(self.carried.h, self.carried.positions, aux.hidden, aux.depth)

    def finish(self) -> mx.array:
        return self.step.state.adapter.logits(self.carried.h[:, -1:])


def cut_own(
    step: Step,
    layer: int,
    ratio: float,
    firsts: list[int],
    scores: Callable[[], mx.array],
    probs: Callable[[], mx.array],
    own: int,
    sinks: int,
) -> tuple[mx.array, mx.array] | None:
    """The step's own `own` tokens (the layer's last rows) at a pruning layer keeping `ratio`:
    (kept, ascending; dropped) where the policy cuts them here, else None (all go on). A cut
    that keeps every one finds the attention spread: the step runs whole from here. scores()
    and probs() give the window's attention on the layer's rows, computed on first use.
    The prompt step and the context-parallel chain both ask here."""
    near = _cut_here(step, layer, firsts, probs, own)
    bounds = policy.bounds(step.config, ratio, own, sinks, near is not None)
    if bounds[0] >= own:
        return None
    kept, dropped = rank_own(step.ranker, layer, scores, own, sinks, bounds, step.config, near)
    if kept.size == own:
        step.phase.runs_whole(policy.SPREAD)
    return kept, dropped


def _cut_here(
    step: Step, layer: int, firsts: list[int], probs: Callable[[], mx.array], own: int
) -> mx.array | None:
    """Whether the step cuts its own tokens at this pruning layer (the policy's first cut, or a
    later one), and if so the own tokens it keeps whatever their scores (a mask: with `point`,
    the place its question points at there, with its neighbours); None where it does not cut
    here."""
    config, phase = step.config, step.phase
    if not phase.prune or (layer in firsts) == phase.cut:
        return None  # runs whole, or between a first cut and the next scheduled one
    if not config.point:
        phase.cuts(layer)
        return mx.zeros((own,), mx.bool_)
    row_positions = step.state[layer].row_positions()
    peak = attention_peak(probs())
    end = max(0, peak.shape[0] - step.tail)  # the question's rows: the tail's aside
    question = peak[max(0, end - step.asking) : end]
    asked_at = row_positions[-min(step.tail + step.asking, row_positions.size)]
    eligible = (row_positions >= config.keep_first) & (row_positions < asked_at - policy.NEAR)
    strength, best, rows = policy.pointing(question, eligible)
    first = not phase.cut
    if first and not policy.first_cut(config, phase, strength, layer == firsts[-1]):
        return None
    phase.cuts(layer)  # every cut keeps the place the question points at
    return policy.pointed_rows(best, rows, config.point, row_positions)[-own:]


def rank_own(
    ranker: Ranker,
    layer: int,
    row_scores: Callable[[], mx.array],
    own: int,
    sinks: int,
    bounds: tuple[int, int],
    config: LazyConfig,
    near: mx.array | None = None,
) -> tuple[mx.array, mx.array]:
    """The step's own `own` tokens ranked among themselves: the top k go on, the sinks, the last
    token and the `near` ones (a mask) always among them, k between `bounds` (the mass rule's
    count, or the one count of a fixed ratio), or every one where the mass is spread past
    `config.dense`. (kept, ascending; dropped)."""
    scores = ranker.own(layer, row_scores, own)
    index = mx.arange(own)
    forced = (index < sinks) | (index == own - 1)
    if near is not None:
        forced = forced | near
    order = mx.argsort(-mx.where(forced, mx.inf, scores.astype(mx.float32)))
    k = policy.kept_count(scores, forced, bounds, config)
    kept = mx.sort(order[:k])
    ranker.narrow(kept)
    return kept, order[k:]


def _revive(
    step: Step, layer: int, scores: mx.array, carried: Carried
) -> tuple[mx.array, mx.array]:
    """The context tokens that go on past `layer`: carried ones still ranked high, and waiting
    ones (pruned here by an earlier step) ranked high now.

    Every row of the layer is ranked by the step's attention, pooled like the step's own tokens
    but over all rows in text order, and the top share `ratio` of them (the count a prune of the
    whole context would keep) decide.
    Returns the carried context tokens' hidden states and positions, positions ascending.
    """
    state, ranker = step.state, step.ranker
    aux, num_layers = state.aux, state.num_layers
    ratio = state.pruning_layers(step.config)[layer]
    h, positions, revived = carried.h, carried.positions, carried.revived
    cache = state[layer]
    split = cache.rows - positions.size  # rows before it are the context's, after it carried
    row_positions = cache.row_positions()
    context_rows = row_positions[:split]
    shaped = ranker.shape_rows(scores, row_positions)
    context, back = shaped[:split], shaped[split : split + revived]
    config = step.config
    count = policy.kept_count(shaped, None, config.kept_bounds(ratio, cache.rows), config)
    bar = mx.sort(shaped)[-count] if count < cache.rows else mx.array(-mx.inf)
    # carried context tokens below the bar stop here
    flags = (back >= bar).tolist() if revived else []
    still = mx.array([i for i, on in enumerate(flags) if on], mx.int32)
    stop = mx.array([i for i, on in enumerate(flags) if not on], mx.int32)
    if stop.size:
        aux.move(positions[stop], layer + 1, None, h[0, stop])
    # waiting context tokens above the bar come back
    waiting = aux.depth[context_rows] == layer + 1
    eligible = waiting & (context >= bar)
    picks = int(eligible.sum().item())
    parts_h = [h[:, still]] if still.size else []
    parts = [positions[still]] if still.size else []
    if picks:
        best = mx.argsort(-mx.where(eligible, context, -mx.inf))[:picks]
        picked = mx.sort(context_rows[best])
        parts_h.append(step.revive(picked, layer + 1)[None])
        parts.append(picked)
        aux.move(picked, num_layers, None)
    if not parts:
        return h[:, :0], positions[:0]
    back_h, back_positions = mx.concatenate(parts_h, axis=1), mx.concatenate(parts)
    order = mx.argsort(back_positions)
    return back_h[:, order], back_positions[order]


def _layer(
    step: Step, layer: int, carried: Carried, forget: bool
) -> tuple[mx.array, mx.array | None]:
    """One layer over the carried tokens in chunks (revived ones first); their outputs and the
    last `window` queries of the step's own tokens. forget: a sliding-window layer drops the
    rows its next chunks can't reach (not at a pruning layer, whose ranking reads every row)."""
    state, chunk, window = step.state, step.chunk, step.window
    adapter, cache, block = state.adapter, state[layer], state.adapter.layers[layer]
    deepest = layer == state.num_layers - 1
    h, positions, first, revived = carried.h, carried.positions, carried.first, carried.revived
    sliding = adapter.sliding_windows[layer]
    count, outputs, observed = positions.size, [], None
    for begin in range(0, revived, chunk):  # earlier positions among cached rows: masked
        end = min(begin + chunk, revived)
        x, at = h[:, begin:end], positions[begin:end]
        if deepest:  # only the step's last token's output is ever read
            append_kv(adapter, block, cache, x, at, None)
            step.evaluate(cache.keys, cache.values, cache.positions)
            continue
        mask = attention_mask(cache, at, sliding, ordered=False)
        out, _ = block_forward(adapter, block, cache, x, at, None, mask)
        step.evaluate(out, cache.keys, cache.values, cache.positions)
        outputs.append(out)
    for begin in range(revived, count, chunk):
        x, at = h[:, begin : begin + chunk], positions[begin : begin + chunk]
        run = None if first is None else first + begin - revived
        if forget and cache.window is not None:
            state.forget_out_of_window(layer, int(at[0].item()) if run is None else run)
        last_chunk = begin + chunk >= count
        if deepest and not last_chunk:
            append_kv(adapter, block, cache, x, at, run)
            step.evaluate(cache.keys, cache.values, cache.positions)
            continue
        mask = attention_mask(cache, at, sliding)
        out, queries = block_forward(adapter, block, cache, x, at, run, mask, deepest, window)
        # a short last chunk observes with the previous chunk's last queries too
        observed = queries if observed is None else mx.concatenate([observed, queries], axis=2)
        observed = observed[:, :, -window:]
        step.evaluate(out, observed, cache.keys, cache.values, cache.positions)
        outputs.append(out)
    return (outputs[0] if len(outputs) == 1 else mx.concatenate(outputs, axis=1)), observed


def _pooled(scores: mx.array, pool: int) -> mx.array:
    """Each score raised to the best of the `pool` scores before it: a chosen token takes the
    tokens that follow it along (a number's other digits, the rest of its sentence)."""
    if not pool or scores.size == 0:
        return scores
    padded = mx.pad(scores, (pool, 0), constant_values=-mx.inf)
    return mx.max(mx.stack([padded[i : i + scores.size] for i in range(pool + 1)]), axis=0)
