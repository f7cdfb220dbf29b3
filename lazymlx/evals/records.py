"""An eval's records: one case under one mode beside stock's outcome, and their files.

Every tally and decision (summary.py, choice.py, search_plan.py) reads these records alone, so
this module imports nothing that runs a model: an earlier run's journal or JSON output can be
re-tallied or re-decided anywhere. The runner (runner.py) makes them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from lazymlx.errors import LazymlxError

if TYPE_CHECKING:
    from lazymlx.evals.cases import Case

BASELINE = "baseline"  # stock mlx-lm's mode in records and reports
NO_IDLE = " no-idle"  # the suffix of a completing preset's run with no idle time before a turn


@dataclass
class Record:
    """One case under one strategy, next to the baseline's outcome on it."""

    family: str
    split: str
    length: int
    seed: int
    kind: str
    source: str
    depth: float
    mode: str
    prompt_tokens: int
    correct: bool | None  # None: no exact answer (open-ended or free-form)
    baseline_correct: bool | None
    agreed_tokens: int  # how many first tokens equal the baseline's
    identical: bool  # every generated token equals the baseline's
    ttft_s: float
    baseline_ttft_s: float | None  # None when the baseline ran in another run (the cache's)
    compute_fraction: float
    step_fraction: float
    generation_tps: float
    peak_memory_gb: float
    text: str
    tokens: list[int] = field(default_factory=list)
    first_ttft_s: float = 0.0  # multi-turn: the first turn's TTFT
    completion_s: float = 0.0  # multi-turn: idle time spent completing before the scored step
    score: float | None = None  # open-ended: similarity to stock's answer, a diagnostic
    target_score: float | None = None  # open-ended: similarity to the gold text (Case.target)
    looped: bool = False  # the answer repeats a run of words back to back (scoring.loops)
    nll: float | None = None  # open-ended: stock's mean per-token NLL of the answer (judge.py)

    def __post_init__(self) -> None:
        # an open answer has no exact one: records written before open answers were judged by
        # score and judge counted words against stock's as right or wrong
        if self.score is not None:
            self.correct = self.baseline_correct = None

    @property
    def kept(self) -> bool | None:
        """Right where the baseline is right (None where the baseline is wrong or no gold)."""
        return self.correct if self.baseline_correct else None


RecordKey = tuple[str, str, int, int, str]


def case_key(case: Case | Record, mode: str) -> RecordKey:
    """What names one case under one strategy across runs (a journal's rows are keyed by it)."""
    return (case.family, case.split, case.length, case.seed, mode)


def records_as_dicts(records: list[Record]) -> list[dict]:
    return [asdict(record) for record in records]


def records_from_dicts(rows: list[dict]) -> list[Record]:
    return [Record(**row) for row in rows]


def read_records(path: str | Path) -> tuple[dict, list[Record]]:
    """The header and records of an earlier eval's JSON output or a journal (one record a line)."""
    try:
        text = Path(path).read_text()
        if text.lstrip().startswith("{") and '"rows"' in text[:100_000]:
            earlier = json.loads(text)
            head = {k: v for k, v in earlier.items() if k not in ("rows", "cases")}
            return head, records_from_dicts(earlier["cases"])
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        return {"records": str(path)}, records_from_dicts(rows)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise LazymlxError(
            f"cannot read eval records from {path} ({error}); pass the JSON that "
            "`lazymlx eval --output json` printed or a --journal file"
        ) from error
