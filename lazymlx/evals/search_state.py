"""A calibration search's state: its cases, modes and caches, and what it reckons from them.

search_plan.py decides which run comes next from records alone; this holds what running them
needs (the model, stock's and the references' caches, the judge, the candidates) and what
sizing the search to a time budget needs (each mode's share of stock's work, a step's
expected seconds at the pace timed, the answers the caches already hold).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from lazymlx.engine.presets import resolve_preset
from lazymlx.evals.baselines import BaselineCache
from lazymlx.evals.choice import CaseId, candidate_strategies, case_id
from lazymlx.evals.records import BASELINE, Record
from lazymlx.evals.reference import REFERENCE, REFERENCE_4BIT
from lazymlx.evals.runner import run_mode
from lazymlx.evals.search_plan import Run, by_work, planned_runs
from lazymlx.evals.strategies import BASELINE_STRATEGY, Strategy
from lazymlx.evals.suite import Suite
from lazymlx.models.adapters import adapter_for


class CalibrationSearch:
    """A calibration search's cases, modes and caches, and what it reckons from them: each
    mode's share of stock's work, a step's expected time at the pace timed (`speed`), and
    stock's and the references' answers the caches already hold."""

    def __init__(
        self, run: Suite, baselines: str | None, reference: bool, only: list[str] | None
    ) -> None:
        self.run, self.speed = run, None  # speed: timed on the first case (calibration._pace)
        self.suite = {case_id(c): c for c in run.cases}
        self.cache = BaselineCache(run.model, Path(baselines) if baselines else None)
        # the 8-bit reference for exact answers (unless --no-reference), the 4-bit for open ones
        wanted = ([REFERENCE] if reference else []) + [REFERENCE_4BIT]
        if not any(case.judge for case in self.suite.values()):
            wanted.remove(REFERENCE_4BIT)
        self.references = run.references(self.cache, wanted) if wanted else {}
        self.judge = run.judge()
        default, gentle = resolve_preset("default", run.name), resolve_preset("gentle", run.name)
        self.strategies = {s.mode: s for s in candidate_strategies(default, only, gentle)}
        self.modes = {**self.strategies, BASELINE: BASELINE_STRATEGY}
        self.modes |= {mode: Strategy(mode, None) for mode in self.references}
        self.adapter = adapter_for(run.model)
        self.order = self.ranked(self.suite)

    def share(self, mode: str, tokens: int, fewest: bool = False) -> float:
        """The mode's share of stock's work on a prompt (a mass rule's most, or `fewest`)."""
        if mode not in self.strategies:
            return 1.0
        layers, ranking = len(self.adapter.layers), self.adapter.ranking_layers
        return self.strategies[mode].config.work_share(tokens, layers, ranking, fewest)

    def ranked(self, cases) -> tuple[str, ...]:
        """The candidates, least work on these cases first (a mass rule by the least it keeps)."""
        shares = {m: lambda n, m=m: self.share(m, n, fewest=True) for m in self.strategies}
        return by_work(shares, [c[1] for c in cases])

    def run_s(self, step: Run) -> float:
        (family, length, seed), mode = step
        case = self.suite[family, length, seed]
        return self.speed.run_s(length, case.max_tokens, self.share(mode, length))

    def references_on(self, case: CaseId) -> list[str]:
        """The references a case runs: the 8-bit one where its answer is exact, the 4-bit one
        where it is open."""
        mode = REFERENCE_4BIT if self.suite[case].judge else REFERENCE
        return [mode] if mode in self.references else []

    def known(self, step: Run) -> dict | None:
        """Stock's or a reference's cached answer to a step (not counted as a hit)."""
        case, mode = step
        store = self.cache if mode == BASELINE else self.references.get(mode, (None, None))[1]
        return None if store is None else store.entries.get(store.key(self.suite[case]))

    def counts(self, case: CaseId) -> bool:
        """Whether a case counts: not one stock answered wrong (unless open-ended)."""
        stock = self.known((case, BASELINE))
        return (
            stock is None
            or self.suite[case].judge is not None
            or bool(self.suite[case].correct(stock["outcome"]["text"]))
        )

    def case_s(self, case: CaseId) -> float:
        """A case's expected time: the runs the search plans on it."""
        known = lambda step: self.known(step) is not None  # noqa: E731
        runs = planned_runs(case, self.order, self.references_on(case), known, self.counts)
        return sum(map(self.run_s, runs))

    def runner(
        self, tick: Callable[[str], None], keep: Callable[[Record], None]
    ) -> Callable[[Run], Record]:
        """The search's run: one step, shown on the clock, its record journaled."""

        def run(step: Run) -> Record:
            (family, length, seed), mode = step
            tick(f"{family} {length} #{seed} {mode}")
            case = self.suite[step[0]]
            record = run_mode(
                self.run.model, self.run.tokenizer, case, self.modes[mode], self.cache,
                self.references, self.judge,
            )  # fmt: skip
            keep(record)
            return record

        return run
