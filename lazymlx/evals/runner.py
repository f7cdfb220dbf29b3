"""Runs cases through the baseline and other strategies, one case at a time, and tallies them.

Every strategy runs right after the baseline on the same case, so a slow spell on a shared
machine hits them alike and each speedup is a side-by-side ratio.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

import mlx.nn as nn
from mlx_lm.tokenizer_utils import TokenizerWrapper

from lazymlx.evals.scoring import AGREE_TOKENS, agrees, correct
from lazymlx.evals.tasks import Case, make_case
from lazymlx.generation import encode_prompt
from lazymlx.measure import BASELINE_STRATEGY, Strategy, run_once

EVAL_SEED = 0  # eval cases use seeds 0, 1, ...
CALIBRATION_SEED = 100_000  # calibration cases start here, so the two sets never share a case


@dataclass
class Record:
    """One case under one strategy."""

    task: str
    length: int
    seed: int
    depth: float
    mode: str
    prompt_tokens: int
    correct: bool
    same_answer: bool  # right exactly when the baseline is right on this case
    agrees: bool  # first AGREE_TOKENS tokens equal the baseline's
    ttft_s: float
    speedup: float  # baseline TTFT / this TTFT, same case, back to back
    compute_fraction: float
    text: str


def make_cases(
    tokenizer: TokenizerWrapper,
    tasks: Iterable[str],
    lengths: Iterable[int],
    per_task: int,
    first_seed: int = EVAL_SEED,
) -> list[Case]:
    return [
        make_case(task, tokenizer, length, first_seed + i)
        for length in lengths
        for task in tasks
        for i in range(per_task)
    ]


def evaluate(
    model: nn.Module,
    tokenizer: TokenizerWrapper,
    cases: list[Case],
    strategies: list[Strategy],
    agree_tokens: int = AGREE_TOKENS,
    on_run: Callable[[Case, str], None] | None = None,
) -> list[Record]:
    """The baseline and then each strategy on every case; baseline records come first per case."""
    records = []
    for case in cases:
        prompt = encode_prompt(tokenizer, case.text).tolist()
        baseline = None
        for strategy in [BASELINE_STRATEGY, *strategies]:
            if on_run:
                on_run(case, strategy.mode)
            run = run_once(model, tokenizer, prompt, case.max_tokens, strategy.config)
            baseline = baseline or run
            right = correct(case, run.text)
            records.append(
                Record(
                    task=case.task,
                    length=case.length,
                    seed=case.seed,
                    depth=case.depth,
                    mode=strategy.mode,
                    prompt_tokens=run.prompt_tokens,
                    correct=right,
                    same_answer=right == correct(case, baseline.text),
                    agrees=agrees(run.tokens, baseline.tokens, agree_tokens),
                    ttft_s=run.ttft_s,
                    speedup=baseline.ttft_s / run.ttft_s,
                    compute_fraction=run.compute_fraction,
                    text=run.text,
                )
            )
    return records


def summarize(
    records: list[Record], by: tuple[str, ...] = ("mode", "task", "length")
) -> list[dict]:
    """Accuracy, agreement, compute fraction and speedup per group, groups in first-seen order."""
    groups: dict[tuple, list[Record]] = {}
    for record in records:
        groups.setdefault(tuple(getattr(record, key) for key in by), []).append(record)
    rows = []
    for key, group in groups.items():
        rows.append(
            dict(zip(by, key, strict=True))
            | {
                "cases": len(group),
                "correct": sum(r.correct for r in group),
                "accuracy": statistics.mean(r.correct for r in group),
                "answer_agreement": statistics.mean(r.same_answer for r in group),
                "agreement": statistics.mean(r.agrees for r in group),
                "compute_fraction": statistics.mean(r.compute_fraction for r in group),
                "speedup": statistics.mean(r.speedup for r in group),
            }
        )
    return rows


def records_as_dicts(records: list[Record]) -> list[dict]:
    return [asdict(record) for record in records]


def records_from_dicts(rows: list[dict]) -> list[Record]:
    return [Record(**row) for row in rows]
