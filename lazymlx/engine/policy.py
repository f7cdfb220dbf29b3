"""The pruning decision, apart from any model: how many of a prompt step's tokens go on past a
layer, which ones, and whether the step cuts there at all or runs whole.

Everything here is a pure function of a config and arrays (the window's attention at a layer,
a step's length), so the rule is tested alone on plain arrays (tests/test_policy.py); the
prompt step (lazymlx/engine/prefill.py) and the context-parallel chain ask it the same questions
at the same layers and so keep the same tokens.

The decision, in the order a step meets it:
- the length gate: a step shorter than `min_prompt` runs whole (`prunes_step`);
- the first cut's depth: at the schedule's first depth, or, with `point`, at the first ranking
  layer from there (before the schedule's second depth) where the step's last words point at
  one place in the text: some of their queries put at least `point` of a head's attention on
  one token before them (`pointing`). A question that quotes a manual, names a constant or
  asks for a key does; a request to summarize does not, and runs whole (`first_cut`);
- the count: a fixed share of the tokens, or under a mass rule the fewest holding `mass` of
  the attention, between the fewest and the most (`bounds`, `kept_count`); where that takes
  more than `dense` of them the attention is spread, and the step runs whole from there;
- which: the highest-scoring tokens, the sinks and the last token, and at every cut of a
  `point` rule the place the question points at there, with AROUND tokens either side
  (`pointed_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import mlx.core as mx

if TYPE_CHECKING:
    from lazymlx.engine.config import LazyConfig

# The sharpest queries of the window whose pointing counts: a question's few telling words (a
# constant's name is two or three tokens) among instructions that point nowhere.
POINTING_QUERIES = 3
# Tokens kept on either side of a place the question points at: the line it quotes and the
# flag, name or value beside it (a manual's option precedes its description).
AROUND = 32
# Rows this near before the question are where local and previous-token heads look from its
# first words, not a place it points at.
NEAR = 16


@dataclass
class Phase:
    """Where one prompt step stands: whether its own tokens are still pruned (False: it runs
    whole from here, for the reason `whole` gives), whether its first cut has fallen and at
    which layer, and the strongest pointing seen before it did."""

    prune: bool
    cut: bool = False
    pointing: float = 0.0
    cut_at: int | None = None
    whole: str = ""

    def cuts(self, layer: int) -> None:
        self.cut, self.cut_at = True, self.cut_at if self.cut_at is not None else layer

    def runs_whole(self, why: str) -> None:
        self.prune, self.whole = False, self.whole or why

    def said(self, num_layers: int, point: bool) -> str:
        """Why the step pruned what it did, in a few words (the stats line's): where its first
        cut fell, or why it ran whole."""
        if self.cut_at is not None and self.prune:
            where = f"first cut at layer {self.cut_at + 1} of {num_layers}"
            return where + (f", where the question points ({self.pointing:.2f})" if point else "")
        return self.whole


# why a step runs whole, as the stats line says it
SHORT, NOWHERE, SPREAD = "short prompt", "no look-up", "spread attention"


def prunes_step(config: LazyConfig, tokens: int) -> bool:
    """The length gate: whether a prompt step of `tokens` tokens prunes its own tokens at all
    (shorter ones run whole: pruning them saves little and changes everyday answers)."""
    return config.prunes and tokens >= config.min_prompt


def bounds(config: LazyConfig, ratio: float, own: int, sinks: int, prune: bool) -> tuple[int, int]:
    """The fewest and the most of a step's `own` tokens that go on past a pruning layer keeping
    `ratio` (all of them when the step runs whole); never fewer than the forced ones, the
    sinks and the last token."""
    if not prune:
        return own, own
    forced = min(own, sinks + 1)
    low, high = config.kept_bounds(ratio, own)
    return max(low, forced), max(high, forced)


def kept_count(
    scores: mx.array, forced: mx.array | None, bounds: tuple[int, int], config: LazyConfig
) -> int:
    """How many tokens go on: with a mass rule (0 < mass < 1) the forced ones and the fewest
    others whose scores hold `mass` of the others' total, clamped to `bounds`, or all of them
    where that is over `dense` of them; else the most. One host sync, only where the bounds
    leave a choice."""
    low, high, mass = *bounds, config.mass
    if low >= high or not 0 < mass < 1:
        return high
    free = scores.astype(mx.float32)
    if forced is not None:
        free = mx.where(forced, 0.0, free)
    free = mx.maximum(free, 0.0)  # random selection's scores are uniform, attention's >= 0
    held = mx.cumsum(mx.sort(free)[::-1])
    need = mx.sum(held < mass * held[-1]) + 1
    fixed = 0 if forced is None else mx.sum(forced)
    count = int((need + fixed).item())
    if count > config.dense * scores.size:
        return scores.size
    return min(max(count, low), high)


def pointing(peak: mx.array, eligible: mx.array) -> tuple[float, mx.array, mx.array]:
    """How sharply the window's queries point at one place in the text: `peak` (queries, rows)
    is each query's attention on each row, the most any head pays it; `eligible` (rows,) the
    rows a question can point at (not the sinks, nor its own words and the NEAR rows before).

    Returns the strength (the mean of the POINTING_QUERIES sharpest queries' best single-row
    probability), and per query its best probability and the row it falls on."""
    if peak.shape[0] == 0 or not eligible.size:
        return 0.0, mx.zeros((0,)), mx.zeros((0,), mx.int32)
    held = mx.where(eligible[None], peak.astype(mx.float32), 0.0)
    best, rows = mx.max(held, axis=1), mx.argmax(held, axis=1)
    top = mx.sort(best)[-min(POINTING_QUERIES, best.size) :]
    return float(mx.mean(top).item()), best, rows


def first_cut(config: LazyConfig, phase: Phase, strength: float, last_chance: bool) -> bool:
    """Whether a step whose first cut has not fallen cuts at this candidate layer (updating
    `phase`): always without `point`; with it, once its pointing so far reaches `point`. At
    the last candidate a step that points nowhere runs whole from here."""
    if not config.point:
        return True
    phase.pointing = max(phase.pointing, strength)
    if phase.pointing >= config.point:
        return True
    if last_chance:
        phase.runs_whole(NOWHERE)
    return False


def pointed_rows(
    best: mx.array, rows: mx.array, threshold: float, row_positions: mx.array
) -> mx.array:
    """The rows within AROUND positions of a place a query points at with at least
    `threshold` of a head's attention: a boolean mask over the rows."""
    sharp = best >= threshold
    targets = row_positions[rows]
    distance = mx.abs(row_positions[:, None] - targets[None])
    return mx.any((distance <= AROUND) & sharp[None], axis=1)
