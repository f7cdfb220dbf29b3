"""`lazymlx eval` as a call: presets beside stock mlx-lm on a split's cases, with a header.

The CLI parses its options and prints the table; this runs the suite, so an app can run the
same evaluation from Python:

    records, head = evaluate_model("qwen2.5-coder-0.5b", ["default", "fast"], lengths="1k")
    rows = lazymlx.evals.summary.summarize(records)
"""

from __future__ import annotations

from pathlib import Path

from lazymlx.evals.baselines import BaselineCache
from lazymlx.evals.choice import preset_or_candidate
from lazymlx.evals.records import Record, case_key
from lazymlx.evals.runner import case_strategies, evaluate, right_cases
from lazymlx.evals.strategies import strategy
from lazymlx.evals.suite import (
    Loader,
    Progress,
    announce,
    journal_writer,
    load_suite,
    quietly,
    uncached,
)
from lazymlx.evals.timing import run_header
from lazymlx.models.loading import load as load_model


def evaluate_model(
    model: str,
    presets: list[str],
    *,
    families: str = "all",
    split: str = "validation",
    lengths: str = "1k,2k",
    cases: int | None = None,
    right_only: bool = False,
    reference: bool = False,
    baselines: str | None = None,
    journal: str | None = None,
    resume: bool = False,
    progress: Progress = quietly,
    load: Loader = load_model,
) -> tuple[list[Record], dict]:
    """The baseline (cached) and the presets on a split's cases (with right_only, those the
    baseline answers right), and with `reference` the 8-bit and 4-bit references beside them
    (their answers cached in the same file), every open answer judged by stock; the records
    and a header. Options as `lazymlx eval` takes them (docs/usage.md); `progress` is told the
    runs ahead, then each as it starts."""
    strategies = [strategy(name, model, preset_or_candidate) for name in presets]
    run = load_suite(model, families, split, lengths, cases, journal, resume, load)
    recorded = {case_key(r, r.mode): r for r in run.earlier}
    suite = run.cases
    cache = BaselineCache(run.model, Path(baselines) if baselines else None)
    runs = uncached(cache, suite)
    counted = None  # with right_only, the baselines looked up (hits, runs) over the whole suite
    if right_only:
        with progress(runs) as advance:
            suite = right_cases(run.model, run.tokenizer, suite, cache, on_run=announce(advance))
        counted, runs = (cache.hits, cache.misses), 0
    references = run.references(cache) if reference else {}
    for mode, (_, other) in references.items():
        runs += uncached(other, suite, mode)
    runs += sum(
        case_key(c, s.mode) not in recorded for c in suite for s in case_strategies(c, strategies)
    )
    with progress(runs) as advance:
        done = evaluate(
            run.model, run.tokenizer, suite, strategies, cache, on_run=announce(advance),
            on_record=journal_writer(journal), recorded=recorded, references=references,
            judge=run.judge(),
        )  # fmt: skip
    cached, ran = counted or (cache.hits, cache.misses)
    head = run_header(
        model,
        strategies,
        split=split,
        cases_per_length={str(k): v for k, v in run.counts.items()},
        right_only=right_only,
        baselines_cached=cached,
        baselines_run=ran,
        baseline_cache=str(cache.path),
        resumed=sum(case_key(r, r.mode) in recorded for r in done),
    )
    return done, run.skipped_note(head)
