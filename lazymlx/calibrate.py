"""Schedule search: the fastest schedule whose answers agree with the baseline's often enough.

Candidates are run on calibration cases (seeds disjoint from the eval suite's) next to the
baseline. Agreement is measured two ways (METRICS): by answers, and by the first tokens.
"Fastest" is ranked by the prefill compute fraction the engine counts, which is exact and
repeatable, rather than by wall time, which this shared machine makes noisy; the measured
speedup is reported beside it. The same run can also evaluate the paper's static and random
strategies at every candidate schedule, which is what the speed–accuracy plot is drawn from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import mlx.nn as nn
from mlx_lm.tokenizer_utils import TokenizerWrapper

from lazymlx.config import PRESETS, SELECTIONS, LazyConfig, baseline_variant, reschedule
from lazymlx.errors import LazymlxError
from lazymlx.evals.runner import Record, evaluate, summarize
from lazymlx.evals.tasks import Case
from lazymlx.measure import BASELINE, Strategy

# Few pruning layers and none early (the design note's finding); from aggressive to gentle. The
# first two prune at the layers where SmolLM2-135M ranks answers best (benchmarks/answer_rank.py
# finds a model's own); the rest at evenly spread depths. Keeping a quarter at 0.57 is left out:
# it passes at calibration lengths, where the default's budget never binds, and lost an 8k
# answer under it (benchmarks/results/eval_8k_layer17_quarter.json).
CANDIDATES: tuple[tuple[tuple[float, float], ...], ...] = (
    ((0.24, 0.4), (0.57, 0.4)),
    ((0.24, 0.5), (0.57, 0.2)),
    ((0.2, 0.5), (0.5, 0.5), (0.8, 0.5)),
    ((0.27, 0.5), (0.54, 0.5), (0.8, 0.5)),
    ((0.27, 0.6), (0.54, 0.5), (0.8, 0.5)),
    ((0.34, 0.7), (0.54, 0.5), (0.8, 0.5)),
    ((0.27, 0.8), (0.54, 0.7), (0.8, 0.7)),
    ((0.5, 0.7),),
)


def schedule_label(config: LazyConfig) -> str:
    """e.g. '0.6@27% 0.5@54% 0.5@80%': keep ratio at depth."""
    return " ".join(f"{ratio:g}@{depth:.0%}" for depth, ratio in config.schedule) or "keep all"


def candidate_strategies(
    schedules: tuple[tuple[tuple[float, float], ...], ...], selections: tuple[str, ...]
) -> list[Strategy]:
    strategies = []
    for schedule in schedules:
        # scored, decoded and length-aware as the default is
        lazy = reschedule(PRESETS["default"], schedule)
        for selection in selections:
            config = lazy if selection == "attention" else baseline_variant(lazy, selection)
            strategies.append(Strategy(f"{selection}: {schedule_label(lazy)}", config))
    return strategies


METRICS = {
    # right or wrong exactly where the baseline is: the accuracy goal, case by case
    "answers": "answer_agreement",
    # the first agree_tokens greedy tokens equal the baseline's: the strictest reading
    "tokens": "agreement",
}


@dataclass
class Calibration:
    frontier: list[dict]  # one row per strategy (the baseline first), accuracy and agreements
    chosen: LazyConfig | None  # the attention schedule chosen, or None if none met the target
    records: list[Record]


def calibrate(
    model: nn.Module,
    tokenizer: TokenizerWrapper,
    cases: list[Case],
    target: float,
    metric: str = "answers",
    selections: tuple[str, ...] = ("attention",),
    agree_tokens: int = 8,
    on_run: Callable[[Case, str], None] | None = None,
) -> Calibration:
    strategies = candidate_strategies(CANDIDATES, selections)
    records = evaluate(model, tokenizer, cases, strategies, agree_tokens, on_run)
    return choose(records, target, metric)


def choose(records: list[Record], target: float, metric: str = "answers") -> Calibration:
    """The frontier of a calibration run and its fastest schedule meeting the target.

    Pure over the records, so an earlier run's measurements can be re-decided for another
    target or metric without running anything again.
    """
    configs = {s.mode: s.config for s in candidate_strategies(CANDIDATES, SELECTIONS)}
    rows = summarize(records, by=("mode",))
    for row in rows:
        if row["mode"] != BASELINE and row["mode"] not in configs:
            raise LazymlxError(
                f"these records hold {row['mode']!r}, which is not a candidate of this version; "
                "run the calibration again"
            )
        config = configs.get(row["mode"])
        row["schedule"] = [list(pair) for pair in config.schedule] if config else []
        row["selection"] = config.selection if config else BASELINE
        row["meets_target"] = row[METRICS[metric]] >= target - 1e-9
    passing = [row for row in rows if row["selection"] == "attention" and row["meets_target"]]
    best = min(passing, key=lambda row: row["compute_fraction"], default=None)
    chosen = None if best is None else configs[best["mode"]]
    return Calibration(frontier=rows, chosen=chosen, records=records)
