"""Choosing a default on calibration cases: the fastest candidate that keeps the baseline's answers.

Candidates run on the calibration split (seeds and documents the validation split never uses)
next to the cached baseline. The bar is the shipped default's: at least `per_length` of the
baseline's right answers kept at every length, and `per_family` in every family pooled over
lengths. "Fastest" is ranked by the compute fraction the engine counts, which is exact and
repeatable where wall time on a shared machine is not; the TTFT speedup is shown beside it. The
fastest candidate keeping `fast_overall` of the answers overall is the `fast` trade. Decisions
are pure over the records, so an earlier run can be re-decided without running anything.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from lazymlx.config import LazyConfig
from lazymlx.evals.runner import Record
from lazymlx.evals.summary import ALL, summarize
from lazymlx.measure import BASELINE, Strategy

# Candidates built from a model's default (so they keep its scoring, decode and length rules):
# the schedules round 3 of benchmarks/STUDIES.md compared on SmolLM2, a generous first prune
# where early layers rank answers roughly and a hard one where they rank them best, and late
# selection (every token to mid-depth or two thirds of depth, then one hard prune), at depths
# given as fractions so they map onto any model's layers.
SCHEDULES = {
    "0.2@67%": ((0.67, 0.2),),
    "0.3@57%": ((0.57, 0.3),),
    "0.6@24% 0.3@57%": ((0.24, 0.6), (0.57, 0.3)),
    "0.5@24% 0.3@57%": ((0.24, 0.5), (0.57, 0.3)),
    "0.4@24% 0.4@57%": ((0.24, 0.4), (0.57, 0.4)),
    "0.6@24% 0.2@50%": ((0.24, 0.6), (0.5, 0.2)),
    "0.2@50%": ((0.5, 0.2),),
}
CANDIDATES: dict[str, Callable[[LazyConfig], LazyConfig]] = {
    "default": lambda default: default,
    **{
        name: lambda default, pairs=pairs: replace(
            default, schedule=pairs, budgets=(), masses=(), floors=()
        )
        for name, pairs in SCHEDULES.items()
    },
}


def candidate_strategies(default: LazyConfig) -> list[Strategy]:
    return [Strategy(name, make(default)) for name, make in CANDIDATES.items()]


@dataclass(frozen=True)
class Bar:
    """What a default must keep of the baseline's right answers, and what `fast` must."""

    per_length: float = 0.97
    per_family: float = 0.90
    fast_overall: float = 0.90


@dataclass
class Calibration:
    frontier: list[dict]  # one row per candidate (the baseline first)
    chosen: str | None  # the fastest candidate meeting the default's bar
    fast: str | None  # the fastest keeping bar.fast_overall overall
    records: list[Record]


def choose(records: list[Record], bar: Bar = Bar()) -> Calibration:
    """The frontier of a calibration run, its default and its fast trade."""
    rows = summarize(records)
    frontier = []
    for mode in dict.fromkeys(r.mode for r in records):
        mine = [row for row in rows if row["mode"] == mode]
        pooled = [r for r in mine if r["family"] == ALL]
        overall = next((r for r in pooled if r["length"] == ALL), pooled[0])
        lengths = [r for r in pooled if r["length"] != ALL]
        families = [r for r in mine if r["family"] != ALL and r["length"] == ALL] or [
            r for r in mine if r["family"] != ALL
        ]
        scored = [r for r in families if r["kept_share"] is not None]
        worst_length = min(lengths, key=lambda r: r["kept_share"] or 0.0)
        worst_family = min(scored, key=lambda r: r["kept_share"], default=None)
        frontier.append(
            {
                "mode": mode,
                "compute_fraction": overall["compute_fraction"],
                "speedup": overall["speedup"],
                "kept": overall["kept"],
                "baseline_right": overall["baseline_right"],
                "kept_share": overall["kept_share"],
                "worst_length": worst_length["length"],
                "worst_length_share": worst_length["kept_share"],
                "worst_family": worst_family["family"] if worst_family else None,
                "worst_family_share": worst_family["kept_share"] if worst_family else None,
                "meets_default": all(
                    (r["kept_share"] or 0) >= bar.per_length - 1e-9 for r in lengths
                )
                and all(r["kept_share"] >= bar.per_family - 1e-9 for r in scored),
                "meets_fast": (overall["kept_share"] or 0) >= bar.fast_overall - 1e-9,
            }
        )
    candidates = [row for row in frontier if row["mode"] != BASELINE]

    def fastest(key: str) -> str | None:
        passing = [row for row in candidates if row[key]]
        best = min(passing, key=lambda row: row["compute_fraction"], default=None)
        return None if best is None else best["mode"]

    return Calibration(frontier, fastest("meets_default"), fastest("meets_fast"), records)
