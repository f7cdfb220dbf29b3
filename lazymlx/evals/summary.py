"""Tallies of eval records: answers kept per family and length, with 95% intervals, and totals.

"Kept" counts only the cases the baseline answers right: the promise is the baseline's answer,
sooner, so a case stock mlx-lm gets wrong says nothing about pruning (a strategy right there is
counted as "gained"). Open-ended answers are tallied by their gold texts, stock's judgment and
loops (words against stock's beside them); free-form cases have no gold, and are tallied by
agreement with the baseline's first tokens. Speedups are total baseline TTFT over total TTFT within a group, over
the cases whose baseline ran in the same run (one read from an earlier run's cache is not
timed beside them); decode rate and peak memory are set beside stock's rows from that run.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from lazymlx.evals.records import BASELINE, Record, RecordKey, case_key
from lazymlx.evals.scoring import bootstrap_interval, wilson

ALL = "all"


def tally(records: list[Record], stock: dict[RecordKey, Record] | None = None) -> dict:
    """One group's counts; `stock`: stock's row of each case, for decode and memory ratios."""
    beside = _beside(records, stock or {})
    scored = [r for r in records if r.baseline_correct is not None]
    right = [r for r in scored if r.baseline_correct]
    kept = sum(bool(r.correct) for r in right)
    low, high = wilson(kept, len(right))
    correct = sum(bool(r.correct) for r in scored)
    return {
        # accuracy, as the paper reports it: right answers of all scored cases, and against
        # stock's on the same cases, with a paired 95% interval (cases resampled)
        "right": correct,
        "accuracy": correct / len(scored) if scored else None,
        "accuracy_delta": (correct - len(right)) / len(scored) if scored else None,
        "accuracy_delta_interval": _paired_interval(scored),
        "cases": len(records),
        "scored": len(scored),
        "baseline_right": len(right),
        "kept": kept,
        "kept_share": kept / len(right) if right else None,
        "kept_low": low if right else None,
        "kept_high": high if right else None,
        "gained": sum(bool(r.correct) for r in scored if not r.baseline_correct),
        "identical": statistics.mean(r.identical for r in records),
        "agreed_tokens": statistics.mean(r.agreed_tokens for r in records),
        # free-form groups only: where answers are scored, agreement is not the measure
        "agreed_interval": None if scored else bootstrap_interval(agreement_strata(records)),
        # open-ended answers: similarity to stock's (the mean, with a 95% bootstrap interval),
        # answers that loop where stock's does not, and code lines against the file's own
        **_open_scores(records, stock or {}),
        "compute_fraction": statistics.mean(r.compute_fraction for r in records),
        "step_fraction": statistics.mean(r.step_fraction for r in records),
        "ttft_s": statistics.mean(r.ttft_s for r in records),
        "speedup": _speedup(records),
        "decode_ratio": _ratio(beside, "generation_tps"),
        "peak_ratio": _ratio(beside, "peak_memory_gb"),
        # multi-turn cases: the first turn's TTFT against stock's (completion never touches it)
        # and the idle time spent completing the context, per 1k tokens of it
        "first_speedup": _inverse(_ratio(beside, "first_ttft_s")),
        "idle_s_per_1k": 1000
        * sum(r.completion_s for r in records)
        / sum(r.prompt_tokens for r in records),
    }


def _open_scores(records: list[Record], stock: dict[RecordKey, Record]) -> dict:
    """Open answers: against the gold text where there is one, by stock's judgment (mean NLL),
    answers that loop where stock's do not, and words against stock's (a diagnostic)."""
    scored = [r for r in records if r.score is not None]
    if not scored:
        return dict.fromkeys(("score", "score_interval", "new_loops", "target_score", "nll"))
    strata: dict[tuple[str, int], list[float]] = {}
    for r in scored:
        strata.setdefault((r.family, r.length), []).append(r.score)
    targets = [r.target_score for r in scored if r.target_score is not None]
    judged = [r.nll for r in scored if r.nll is not None]
    return {
        "score": statistics.mean(r.score for r in scored),
        "score_interval": bootstrap_interval(list(strata.values()), resamples=2000),
        "new_loops": sum(r.looped and not _stock_looped(r, stock) for r in scored),
        "target_score": statistics.mean(targets) if targets else None,
        "nll": statistics.mean(judged) if judged else None,
    }


def _stock_looped(record: Record, stock: dict[RecordKey, Record]) -> bool:
    base = stock.get(case_key(record, BASELINE))
    return base is not None and base.looped


def _inverse(value: float | None) -> float | None:
    return None if value is None else 1 / value


def _paired_interval(scored: list[Record]) -> tuple[float, float] | None:
    """95% bootstrap interval of the accuracy difference against stock, case by case (each
    family at each length resampled within itself)."""
    if not scored or all(r.mode == BASELINE for r in scored):
        return None
    strata: dict[tuple[str, int], list[float]] = {}
    for r in scored:
        strata.setdefault((r.family, r.length), []).append(
            float(bool(r.correct)) - float(bool(r.baseline_correct))
        )
    return bootstrap_interval(list(strata.values()), resamples=2000)


def agreement_strata(records: list[Record]) -> list[list[float]]:
    """Tokens agreeing with the baseline's, one list per family and length (a bootstrap's strata)."""
    strata: dict[tuple[str, int], list[float]] = {}
    for r in records:
        strata.setdefault((r.family, r.length), []).append(r.agreed_tokens)
    return list(strata.values())


def _speedup(records: list[Record]) -> float | None:
    """Total baseline TTFT over total TTFT, over the cases whose baseline ran in the same run."""
    timed = [r for r in records if r.baseline_ttft_s is not None]
    if not timed:
        return None
    return sum(r.baseline_ttft_s for r in timed) / sum(r.ttft_s for r in timed)


def _stock_rows(records: Iterable[Record]) -> dict[RecordKey, Record]:
    """Stock's row of each case, the first (a run over cached baselines writes it again)."""
    stock: dict[RecordKey, Record] = {}
    for r in records:
        if r.mode == BASELINE:
            stock.setdefault(case_key(r, BASELINE), r)
    return stock


def _beside(records: list[Record], stock: dict[RecordKey, Record]) -> list[tuple[Record, Record]]:
    """(row, stock's row) where stock ran in the same run: its TTFT is the one the row holds."""
    pairs = []
    for r in records:
        base = stock.get(case_key(r, BASELINE))
        if base is not None and r.baseline_ttft_s is not None and base.ttft_s == r.baseline_ttft_s:
            pairs.append((r, base))
    return pairs


def _ratio(pairs: list[tuple[Record, Record]], field: str) -> float | None:
    """The rows' total of `field` over stock's, over the pairs where both measured it (an
    answer of one token has no decode rate)."""
    both = [(getattr(r, field), getattr(base, field)) for r, base in pairs]
    both = [(mine, theirs) for mine, theirs in both if mine > 0 and theirs > 0]
    if not both:
        return None
    return sum(mine for mine, _ in both) / sum(theirs for _, theirs in both)


def _groups(records: Iterable[Record], key) -> dict[tuple, list[Record]]:
    groups: dict[tuple, list[Record]] = {}
    for record in records:
        groups.setdefault(key(record), []).append(record)
    return groups


def summarize(records: list[Record]) -> list[dict]:
    """Rows per mode: each family at each length, each family over all lengths, each length over
    all families, and everything; `family`/`length` is "all" in the pooled rows."""
    rows, stock = [], _stock_rows(records)
    for mode, mine in _groups(records, lambda r: (r.mode,)).items():
        families = list(dict.fromkeys(r.family for r in mine))
        lengths = sorted({r.length for r in mine})
        keyed = _groups(mine, lambda r: (r.family, r.length))
        for family in families:
            for length in lengths:
                if (family, length) in keyed:
                    rows.append(
                        {"mode": mode[0], "family": family, "length": length}
                        | tally(keyed[family, length], stock)
                    )
            if len(lengths) > 1:
                group = [r for r in mine if r.family == family]
                rows.append(
                    {"mode": mode[0], "family": family, "length": ALL} | tally(group, stock)
                )
        for length in lengths:
            group = [r for r in mine if r.length == length]
            rows.append({"mode": mode[0], "family": ALL, "length": length} | tally(group, stock))
        if len(lengths) > 1:
            rows.append({"mode": mode[0], "family": ALL, "length": ALL} | tally(mine, stock))
    return rows
