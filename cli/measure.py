"""`lazymlx bench`, `eval` and `calibrate`: thin commands over lazymlx.evals.timing, evals and calibrate."""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from lazymlx.cli.console import err
from lazymlx.cli.loading import Parallel
from lazymlx.cli.report import (
    Column,
    check_format,
    clock_progress,
    emit,
    percent,
    ratio,
    run_progress,
    seconds,
    yes_no,
)
from lazymlx.errors import LazymlxError
from lazymlx.lengths import CALIBRATION_LENGTHS, parse_lengths
from lazymlx.models.registry import DEFAULT_MODEL

Model = Annotated[
    str, typer.Option("--model", "-m", help="Registry name, model directory, .gguf or hub id.")
]
Output = Annotated[str, typer.Option("--output", "-o", help="md (a table), json or csv.")]
Journal = Annotated[
    str | None,
    typer.Option("--journal", help="Append every record to this JSON-lines file as it comes."),
]
Resume = Annotated[
    bool,
    typer.Option(
        "--resume", help="Keep the --journal's records and run only the cases not in it yet."
    ),
]


def _presets(text: str) -> list[str]:
    """Preset names; 'none' runs stock alone (filling the baseline cache)."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if names == ["none"]:
        return []
    if not names:
        raise LazymlxError(
            "no preset given to --lazy; name one or more (e.g. gentle,fast), or none"
        )
    return list(dict.fromkeys(names))


def _header(model: str, strategies, **settings) -> dict:
    """The run's header, with what each preset in it does."""
    from lazymlx.evals.timing import header

    presets = {s.mode: s.config.describe() if s.config else "stock mlx-lm" for s in strategies}
    return header(model, **settings) | {"presets": presets}


def _load(model: str):
    from lazymlx.cli.loading import load_model

    return load_model(model)


BENCH_COLUMNS: list[Column] = [
    ("mode", "mode", str),
    ("prompt_tokens", "prompt tokens", str),
    ("ttft_s", "TTFT (s)", seconds),
    ("ttft_std", "± std", lambda v: "—" if v is None else seconds(v)),
    ("prompt_tps", "prompt tok/s", lambda v: f"{v:.1f}"),
    ("generation_tps", "gen tok/s", lambda v: f"{v:.1f}"),
    ("peak_memory_gb", "peak GB", seconds),
    ("compute_fraction", "work vs stock", percent),
    ("pruned", "pruned", lambda v: "—" if v is None else "yes" if v else "nothing"),
    ("speedup", "speedup", ratio),
    ("answer_matches_baseline", "= baseline", yes_no),
    ("answer_correct", "answer right", yes_no),
]


BenchPresets = Annotated[
    str | None,
    typer.Option(
        "--lazy",
        help="Presets to time next to stock mlx-lm, comma-separated (default: every one of "
        "default, gentle, fast and the model's saved presets that prunes on it): any preset, "
        "keep-all (lazymlx's engine keeping every token), static, random, or off (stock again).",
        show_default=False,
    ),
]


def bench(
    prompt_len: Annotated[
        str, typer.Option("--prompt-len", "-l", help="Prompt tokens: 512, 2k, 8k or a list 1k,2k.")
    ] = "2k",
    model: Model = DEFAULT_MODEL,
    lazy: BenchPresets = None,
    gen_len: Annotated[
        int, typer.Option("--gen-len", "-n", min=1, help="Tokens to generate.")
    ] = 128,
    repeats: Annotated[
        int, typer.Option("--repeats", "-r", min=1, help="Timed runs per row, after one warm-up.")
    ] = 1,
    prompt: Annotated[
        str,
        typer.Option(
            "--prompt",
            help="A one-prompt task of the eval (passkey, the default; code, needle-docs, json, "
            "lookalike...), random, or a text FILE.",
        ),
    ] = "passkey",
    output: Output = "md",
    parallel: Parallel = "tensor",
) -> None:
    """Time to first token and more, stock mlx-lm next to LazyLLM presets, on one prompt per length.

    With no --lazy it times every preset that prunes on the model (a default that runs whole
    would time stock against itself), and the header says which and why.

    Under mlx.launch with --parallel context every preset runs twice, on rank 0 alone (one
    process) and on the chain of all ranks, side by side; rank 0 prints the table.
    """
    from lazymlx.evals.outcome import strategy
    from lazymlx.evals.timing import bench as run_bench

    check_format(output)
    lengths = parse_lengths(prompt_len)
    names, compares = _bench_presets(lazy, model)
    presets = [strategy(name, model) for name in names]
    ranks = _bench_group(parallel, model, presets, lengths)
    loaded, tokenizer = _load(model)
    strategies, where = _beside_the_chain(loaded, presets, ranks)
    total = len(lengths) * (1 + len(strategies)) * (repeats + 1)
    with run_progress(total) as advance:
        rows = run_bench(
            loaded, tokenizer, lengths, strategies, prompt, gen_len, repeats, on_run=advance,
            where=where,
        )  # fmt: skip
    head = _header(
        model, presets, compares=compares, prompt=prompt, gen_len=gen_len, repeats=repeats,
        warmup="1 per mode, at the timed length", **_parallel_note(parallel, ranks),
    )  # fmt: skip
    columns = CHAIN_COLUMNS if ranks else BENCH_COLUMNS
    emit(output, head, _against_one_process(rows, ranks), columns)


def _bench_presets(lazy: str | None, model: str) -> tuple[list[str], str]:
    """The presets a bench times, and the header's line on what it compares and why: those
    --lazy names, or with none every preset of the model's that prunes (default, gentle, fast
    and any it ships or `lazymlx calibrate` saved for it), since a preset that runs every
    prompt whole (a registry model's default today) would time stock against itself."""
    from lazymlx.engine.presets import resolve_preset, saved_presets, shipped_presets

    if lazy is not None:
        return _presets(lazy), "stock mlx-lm beside the presets --lazy names"
    names = ["default", "gentle", "fast", *shipped_presets(model), *saved_presets(model)]
    names = list(dict.fromkeys(names))
    pruning = [name for name in names if resolve_preset(name, model).prunes]
    whole = [name for name in names if name not in pruning]
    compares = (
        f"stock mlx-lm beside every preset that prunes on {model} ({', '.join(pruning)}), "
        "to show what each saves"
    )
    if whole:
        them = "it runs" if len(whole) == 1 else "they run"
        compares += f"; left out: {', '.join(whole)} ({them} every prompt whole: stock's work)"
    return pruning, compares


CHAIN_COLUMNS: list[Column] = [
    *BENCH_COLUMNS[:1],
    ("ranks", "ranks", str),
    *BENCH_COLUMNS[1:],
    ("vs_one_process", "TTFT vs 1 process", lambda v: "—" if v is None else ratio(v)),
    ("same_as_one_process", "= 1 process", yes_no),
]


def _bench_group(parallel: str, model: str, presets, lengths: list[int]) -> int:
    """With --parallel context under mlx.launch: the chain's size, once joined (the other ranks
    follow rank 0's prompt steps and end here), after refusing in one line what a chain can't
    time; else 0 (one process, or a tensor-parallel group, which bench runs as it is)."""
    from lazymlx.cli.loading import in_group, join_parallel

    ranks = 0
    if parallel == "context":
        if not in_group():
            raise LazymlxError(
                "bench --parallel context times a chain of ranks beside one process: run it "
                "under mlx.launch with 2 or more ranks (docs/distributed.md)"
            )
        if not presets:
            raise LazymlxError(
                "bench --parallel context times presets on the chain; --lazy none leaves none "
                "(stock mlx-lm runs on rank 0 alone)"
            )
        if any(s.config is None for s in presets):
            raise LazymlxError(
                "--lazy off is stock mlx-lm, which runs on rank 0 alone (the baseline row); "
                "--lazy keep-all times lazymlx's engine keeping every token on the chain"
            )
        from lazymlx import collectives
        from lazymlx.context_parallel import MIN_SLICE

        ranks = collectives.group().size()
        if min(lengths) < MIN_SLICE * ranks:
            raise LazymlxError(
                f"a {min(lengths)}-token prompt is too short for a chain of {ranks} ranks, which "
                f"runs prompts of at least {MIN_SLICE * ranks} tokens ({MIN_SLICE} a rank); "
                "pass a longer --prompt-len"
            )
    join_parallel(parallel, model)
    return ranks


def _beside_the_chain(loaded, presets, ranks: int):
    """On a chain (ranks > 0) each preset twice, on rank 0 alone and on the chain, and where
    each runs; else the presets as they are, run where the command runs."""
    from contextlib import nullcontext

    from lazymlx import context_parallel
    from lazymlx.engine.cache import LazyState
    from lazymlx.evals.outcome import Strategy

    if not ranks:
        return presets, None
    context_parallel.check_model(LazyState(loaded))  # refused before any run
    chained = [Strategy(f"{s.mode} on {ranks} ranks", s.config) for s in presets]
    on_chain = {s.mode for s in chained}

    def where(strategy):
        return nullcontext() if strategy.mode in on_chain else context_parallel.alone()

    return [s for pair in zip(presets, chained, strict=True) for s in pair], where


def _against_one_process(rows: list[dict], ranks: int) -> list[dict]:
    """Each chain row with its ranks, its TTFT against one process's with the same preset, and
    whether its answer is one process's; the other rows with 1 rank (no chain: as they are)."""
    if not ranks:
        return rows
    alone = {(row["prompt_tokens"], row["mode"]): row for row in rows}
    suffix = f" on {ranks} ranks"
    for row in rows:
        one = alone.get((row["prompt_tokens"], row["mode"].removesuffix(suffix)))
        chained = row["mode"].endswith(suffix)
        row["ranks"] = ranks if chained else 1
        row["vs_one_process"] = one["ttft_s"] / row["ttft_s"] if chained else None
        row["same_as_one_process"] = one["text"] == row["text"] if chained else None
    return rows


def _parallel_note(parallel: str, ranks: int) -> dict:
    """The header's line on where the rows ran (none: one process)."""
    from lazymlx.cli.loading import in_group

    if ranks:
        return {
            "parallel": f"context: each preset on rank 0 alone and on a chain of {ranks} ranks "
            "(every rank the whole model); stock on rank 0 alone"
        }
    if in_group():
        from lazymlx import collectives

        size = collectives.group().size()
        return {"parallel": f"tensor: the model split over {size} ranks, every row"}
    return {}


def accuracy_cell(row: dict) -> str:
    """e.g. '31/39 79% (-3 pts [-8, 0])': right answers of the scored cases, as the paper
    reports accuracy, and the paired difference from stock's on the same cases."""
    if row["accuracy"] is None:
        return "—"
    cell = f"{row['right']}/{row['scored']} {row['accuracy']:.0%}"
    interval = row["accuracy_delta_interval"]
    if interval is not None:
        low, high = interval
        cell += f" ({100 * row['accuracy_delta']:+.0f} pts [{100 * low:+.0f}, {100 * high:+.0f}])"
    return cell


def open_cell(row: dict) -> str:
    """e.g. 'gold 0.41, NLL 0.62, 1 loop; words 0.91 [0.84-0.97]': open answers' mean similarity
    to their gold texts, stock's mean NLL of them (lazymlx/evals/judge.py), answers that loop
    where stock's do not, and, as a diagnostic, their words against stock's with its 95%
    interval."""
    if row["score"] is None:
        return "—"
    parts = []
    if row["target_score"] is not None:
        parts.append(f"gold {row['target_score']:.2f}")
    if row["nll"] is not None:
        parts.append(f"NLL {row['nll']:.3f}")
    loops = row["new_loops"]
    parts.append(f"{loops} loop{'s' * (loops != 1)}")
    low, high = row["score_interval"]
    return ", ".join(parts) + f"; words {row['score']:.2f} [{low:.2f}-{high:.2f}]"


def kept_cell(row: dict) -> str:
    """e.g. '12/13 92% [67-99%]': answers kept of the baseline's right ones, with the 95% interval;
    for free-form cases, e.g. '17.8 tok [10.8-25.0]': leading tokens agreeing with the baseline's."""
    if row["agreed_interval"] is not None:
        low, high = row["agreed_interval"]
        return f"{row['agreed_tokens']:.1f} tok [{low:.1f}-{high:.1f}]"
    if row["kept_share"] is None:
        return "—"
    return (
        f"{row['kept']}/{row['baseline_right']} {row['kept_share']:.0%} "
        f"[{row['kept_low']:.0%}-{row['kept_high']:.0%}]"
    )


EVAL_COLUMNS: list[Column] = [
    ("family", "family", str),
    ("length", "length", str),
    ("mode", "mode", str),
    ("cases", "cases", str),
    ("baseline_right", "baseline right", str),
    ("kept_cell", "kept or free-form agreement [95% CI]", str),
    ("gained", "gained", str),
    ("accuracy_cell", "accuracy (vs stock [95% CI])", str),
    ("open_cell", "open answers: gold, stock's NLL, new loops; words vs stock", str),
    ("identical", "tokens = baseline", percent),
    ("compute_fraction", "work vs stock", percent),
    ("speedup", "TTFT speedup", lambda v: "—" if v is None else ratio(v)),
    ("decode_ratio", "decode vs stock", lambda v: "—" if v is None else ratio(v)),
    ("peak_ratio", "peak memory vs stock", lambda v: "—" if v is None else ratio(v)),
]


Families = Annotated[
    str,
    typer.Option(
        "--families", "-f", help="all, scored, freeform, or a list such as passkey,kept,chat."
    ),
]
Split = Annotated[
    str,
    typer.Option("--split", help="validation (report) or calibration (choose knobs on it)."),
]
EvalLengths = Annotated[
    str, typer.Option("--lengths", "-l", help="Context lengths, e.g. 1k,2k,4k,8k.")
]
EvalPresets = Annotated[
    str,
    typer.Option(
        "--lazy",
        help="Presets to evaluate next to the baseline, comma-separated; none: stock alone.",
    ),
]
EvalCases = Annotated[
    int | None,
    typer.Option(
        "--cases",
        "-c",
        min=1,
        help="Cases per family and length (default: the suite's, 3-4 at 1k-2k, 1-2 beyond).",
    ),
]
Baselines = Annotated[
    str | None,
    typer.Option("--baselines", help="Baseline cache file to read and add to (default: yours)."),
]
ReferencesBeside = Annotated[
    bool,
    typer.Option(
        "--reference/--no-reference",
        help="Run the two references beside: stock with its weights round-tripped through 8 "
        "bits and through 4 bits (what most MLX users run).",
    ),
]
RightOnly = Annotated[
    bool,
    typer.Option(
        "--right-only",
        help="Run the presets only on cases the baseline answers right (the only ones they "
        "can keep); free-form cases are left out.",
    ),
]
EvalRecords = Annotated[
    str | None,
    typer.Option(
        "--records",
        help="Tally an earlier run's --output json or --journal instead of running.",
    ),
]


def evaluate(
    families: Families = "all",
    split: Split = "validation",
    lengths: EvalLengths = "1k,2k",
    lazy: EvalPresets = "default",
    model: Model = DEFAULT_MODEL,
    cases: EvalCases = None,
    baselines: Baselines = None,
    journal: Journal = None,
    resume: Resume = False,
    reference: ReferencesBeside = False,
    right_only: RightOnly = False,
    records: EvalRecords = None,
    output: Output = "md",
) -> None:
    """Answers kept per task family and length by LazyLLM presets, against stock mlx-lm."""
    from lazymlx.evals.outcome import strategy
    from lazymlx.evals.records import read_records

    check_format(output)
    if records is not None:
        _emit_eval(output, *read_records(records))
        return
    strategies = [strategy(name, model) for name in _presets(lazy)]
    done, head = _run_suite(
        model, families, split, lengths, cases, strategies, baselines, journal, resume,
        right_only, reference,
    )  # fmt: skip
    _emit_eval(output, head, done)


def _emit_eval(output: str, head: dict, records) -> None:
    from lazymlx.evals.records import records_as_dicts
    from lazymlx.evals.summary import summarize

    rows = summarize(records)
    for row in rows:
        row["kept_cell"] = kept_cell(row)
        row["accuracy_cell"] = accuracy_cell(row)
        row["open_cell"] = open_cell(row)
    emit(output, head, rows, EVAL_COLUMNS, cases=records_as_dicts(records))


def _run_suite(
    model, families, split, lengths, cases, strategies, baselines, journal, resume,
    right_only=False, reference=False,
):  # fmt: skip
    """The baseline (cached) and the strategies on a split's cases (with right_only, those the
    baseline answers right), and with `reference` the 8-bit and 4-bit references beside them
    (their answers cached in the same file), every open answer judged by stock; the records
    and a header."""
    from pathlib import Path

    from lazymlx.evals.baselines import BaselineCache
    from lazymlx.evals.records import case_key
    from lazymlx.evals.runner import case_strategies, right_cases
    from lazymlx.evals.runner import evaluate as run_eval

    run = _suite(model, families, split, lengths, cases, journal, resume)
    recorded = {case_key(r, r.mode): r for r in run.earlier}
    suite = run.cases
    cache = BaselineCache(run.model, Path(baselines) if baselines else None)
    runs = _uncached(cache, suite)
    counted = None  # with right_only, the baselines looked up (hits, runs) over the whole suite
    if right_only:
        with run_progress(runs) as advance:
            suite = right_cases(run.model, run.tokenizer, suite, cache, on_run=_announce(advance))
        counted, runs = (cache.hits, cache.misses), 0
    references = _references(model, cache) if reference else {}
    for _, other in references.values():
        runs += _uncached(other, suite)
    runs += sum(
        case_key(c, s.mode) not in recorded for c in suite for s in case_strategies(c, strategies)
    )
    with run_progress(runs) as advance:
        done = run_eval(
            run.model, run.tokenizer, suite, strategies, cache, on_run=_announce(advance),
            on_record=_journal_writer(journal), recorded=recorded, references=references,
            judge=_judge(run),
        )  # fmt: skip
    cached, ran = counted or (cache.hits, cache.misses)
    head = _header(
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


@dataclass
class _Suite:
    """A run's model and its cases of a split, with the earlier records a resumed run keeps."""

    model: Any
    tokenizer: Any
    cases: list
    counts: dict[int, int]  # cases per length
    earlier: list
    skipped: list[str]  # chat families a model without a chat template cannot run

    def skipped_note(self, head: dict) -> dict:
        """The run's header, saying which families were left out and why."""
        if self.skipped:
            head["skipped"] = f"{', '.join(self.skipped)}: the model has no chat template"
        return head


def _suite(model, families, split, lengths, cases, journal, resume) -> _Suite:
    """The model loaded and the split's cases of the families at the lengths (a base model: no
    chat families); a resumed run's earlier records from its journal."""
    from pathlib import Path

    from lazymlx.evals.cases import make_cases, parse_families, suite_counts
    from lazymlx.evals.families import CHAT_FAMILIES
    from lazymlx.evals.records import read_records

    if resume and not journal:
        raise LazymlxError("--resume needs --journal FILE: the journal of the run to go on with")
    names, sizes = parse_families(families), parse_lengths(lengths)
    counts = suite_counts(split, sizes, cases)
    earlier = read_records(journal)[1] if resume and Path(journal).exists() else []
    loaded, tokenizer = _load(model)
    skipped = []
    if tokenizer.chat_template is None:  # a base model: no chat families
        skipped = [name for name in names if name in CHAT_FAMILIES]
        names = [name for name in names if name not in CHAT_FAMILIES]
    suite = make_cases(tokenizer, names, split, counts)
    return _Suite(loaded, tokenizer, suite, counts, earlier, skipped)


def _uncached(cache, cases) -> int:
    """How many of the cases' stock answers the cache lacks (its counts then start over)."""
    runs = sum(cache.get(c) is None for c in cases)
    cache.hits = cache.misses = 0
    return runs


def _references(model: str, cache, modes=None) -> dict:
    """The references (lazymlx/evals/reference.py), by mode: the model again with its weights
    round-tripped through 8 bits and through 4 bits (`modes`: only these), each with its
    answers' cache in the baselines' file."""
    from lazymlx.evals.baselines import BaselineCache
    from lazymlx.evals.reference import REFERENCE_BITS, round_trip

    made = {}
    for mode, bits in REFERENCE_BITS.items():
        if modes is None or mode in modes:
            other = round_trip(_load(model)[0], bits)
            made[mode] = (other, BaselineCache(other, cache.path))
    return made


def _judge(run):
    """Stock's judgment of open answers, when the run has any (lazymlx/evals/judge.py)."""
    from lazymlx.evals.judge import Judge

    return Judge(run.model) if any(case.judge for case in run.cases) else None


def _journal_writer(journal: str | None):
    """A runner's on_record: each record appended to the journal as a JSON line (none: kept
    nowhere)."""
    from lazymlx.evals.records import records_as_dicts

    def keep(record) -> None:
        if journal:
            with open(journal, "a") as log:
                log.write(json.dumps(records_as_dicts([record])[0]) + "\n")

    return keep


def _search(
    model, families, lengths, cases, only, baselines, journal, resume, reference, bar, minutes
):
    """Calibration's search (lazymlx/evals/search.py) on the calibration split: stock and the
    reference on every case, then candidates cheapest first, each dropped once it cannot meet
    the bar; with `minutes` the case set sized to fit from stock's pace on the first case, and
    the search stopped at the budget. The records (a resumed journal's first) and a header
    saying what the choice rests on."""
    import time

    from lazymlx.evals.calibrate import case_id
    from lazymlx.evals.records import BASELINE
    from lazymlx.evals.search import Plan, fit, run_order, run_search

    started = time.monotonic()
    run = _suite(model, families, "calibration", lengths, cases, journal, resume)
    search = _Search(run, {case_id(c): c for c in run.cases}, model, baselines, reference, only)
    wanted = run_order(search.suite)  # every case asked for; a budget may keep fewer
    ids, sized = _resumed_cases(wanted, run.earlier, minutes)
    keep = _journal_writer(journal)
    # timed on a one-prompt case: a later turn's TTFT covers only what it adds to the context
    paced = next((c for c in ids if len(search.suite[c].segments) == 1), ids[0])
    search.speed, probe = _pace(run.model, run.tokenizer, search.suite[paced], search.cache)
    deadline = None if minutes is None else started + 60 * minutes
    if deadline is not None and not sized:
        ids = fit(ids, search.case_s, deadline - time.monotonic())
    kept = set(ids)
    records = [r for r in run.earlier if case_id(r) in kept]
    ran = {case_id(r) for r in records if r.mode == BASELINE}
    if probe is not None and paced in kept and paced not in ran:
        records.append(probe)
        keep(probe)
    exact = frozenset(c for c in ids if search.suite[c].judge is None)
    opened = frozenset(ids) - exact
    plan = Plan(ids, search.ranked(ids), exact if reference else frozenset(), bar, opened)
    with clock_progress(sum(map(search.case_s, ids))) as tick:

        def stop(step) -> bool:
            return deadline is not None and time.monotonic() + search.run_s(step) > deadline

        done = run_search(plan, search.runner(tick, keep), records, stop)
    head = _header(model, list(search.strategies.values()), split="calibration", minutes=minutes)
    head |= _rests_on(plan, done, search.speed, time.monotonic() - started)
    head |= {"resumed": len(run.earlier)} | _left_out(wanted, ids)
    return done, run.skipped_note(head)


def _resumed_cases(ids: tuple, earlier: list, minutes: float | None) -> tuple[tuple, bool]:
    """The cases to run, and whether a budget sized them already: a budgeted run that reached
    its candidates goes on with its cases, as sized (stock ran on all of them first); one
    stopped before them never used its sizing and is sized again."""
    from lazymlx.evals.calibrate import case_id
    from lazymlx.evals.records import BASELINE
    from lazymlx.evals.reference import REFERENCE_BITS

    sized = minutes is not None and any(r.mode not in (BASELINE, *REFERENCE_BITS) for r in earlier)
    if sized:
        resumed = {case_id(r) for r in earlier if r.mode == BASELINE}
        ids = tuple(c for c in ids if c in resumed)
    return ids, sized


def _left_out(wanted: tuple, ids: tuple) -> dict:
    """The header's note of the cases a time budget left out, by length (none: nothing)."""
    kept = set(ids)
    cut: dict[int, int] = {}
    for _, length, _ in (c for c in wanted if c not in kept):
        cut[length] = cut.get(length, 0) + 1
    if not cut:
        return {}
    return {
        "left_out": f"{sum(cut.values())} of {len(wanted)} cases ("
        + ", ".join(f"{n} at {length}" for length, n in sorted(cut.items()))
        + ") did not fit the time budget; --journal with --resume and no --minutes adds them"
    }


class _Search:
    """A calibration search's cases, modes and caches, and what it reckons from them: each
    mode's share of stock's work, a step's expected time at the pace timed (`speed`), and
    stock's and the references' answers the caches already hold."""

    def __init__(self, run: _Suite, suite: dict, model: str, baselines, reference: bool, only):
        from pathlib import Path

        from lazymlx.engine.presets import resolve_preset
        from lazymlx.evals.baselines import BaselineCache
        from lazymlx.evals.calibrate import candidate_strategies
        from lazymlx.evals.outcome import BASELINE_STRATEGY, Strategy
        from lazymlx.evals.records import BASELINE
        from lazymlx.evals.reference import REFERENCE, REFERENCE_4BIT
        from lazymlx.models.adapters import adapter_for

        self.run, self.suite, self.speed = run, suite, None
        self.cache = BaselineCache(run.model, Path(baselines) if baselines else None)
        # the 8-bit reference for exact answers (unless --no-reference), the 4-bit for open ones
        wanted = ([REFERENCE] if reference else []) + [REFERENCE_4BIT]
        if not any(case.judge for case in suite.values()):
            wanted.remove(REFERENCE_4BIT)
        self.references = _references(model, self.cache, wanted) if wanted else {}
        self.judge = _judge(run)
        default, gentle = resolve_preset("default", model), resolve_preset("gentle", model)
        self.strategies = {s.mode: s for s in candidate_strategies(default, only, gentle)}
        self.modes = {**self.strategies, BASELINE: BASELINE_STRATEGY}
        self.modes |= {mode: Strategy(mode, None) for mode in self.references}
        self.adapter = adapter_for(run.model)
        self.order = self.ranked(suite)

    def share(self, mode: str, tokens: int, fewest: bool = False) -> float:
        """The mode's share of stock's work on a prompt (a mass rule's most, or `fewest`)."""
        if mode not in self.strategies:
            return 1.0
        layers, ranking = len(self.adapter.layers), self.adapter.ranking_layers
        return self.strategies[mode].config.work_share(tokens, layers, ranking, fewest)

    def ranked(self, cases) -> tuple[str, ...]:
        """The candidates, least work on these cases first (a mass rule by the least it keeps)."""
        from lazymlx.evals.search import by_work

        shares = {m: lambda n, m=m: self.share(m, n, fewest=True) for m in self.strategies}
        return by_work(shares, [c[1] for c in cases])

    def run_s(self, step) -> float:
        (family, length, seed), mode = step
        case = self.suite[family, length, seed]
        return self.speed.run_s(length, case.max_tokens, self.share(mode, length))

    def references_on(self, case) -> list[str]:
        """The references a case runs: the 8-bit one where its answer is exact, the 4-bit one
        where it is open."""
        from lazymlx.evals.reference import REFERENCE, REFERENCE_4BIT

        mode = REFERENCE_4BIT if self.suite[case].judge else REFERENCE
        return [mode] if mode in self.references else []

    def known(self, step):
        """Stock's or a reference's cached answer to a step (not counted as a hit)."""
        from lazymlx.evals.records import BASELINE

        case, mode = step
        store = self.cache if mode == BASELINE else self.references.get(mode, (None, None))[1]
        return None if store is None else store.entries.get(store.key(self.suite[case]))

    def counts(self, case) -> bool:
        """Whether a case counts: not one stock answered wrong (unless open-ended)."""
        from lazymlx.evals.records import BASELINE

        stock = self.known((case, BASELINE))
        return (
            stock is None
            or self.suite[case].judge is not None
            or bool(self.suite[case].correct(stock["outcome"]["text"]))
        )

    def case_s(self, case) -> float:
        """A case's expected time: the runs the search plans on it."""
        from lazymlx.evals.search import planned_runs

        known = lambda step: self.known(step) is not None  # noqa: E731
        runs = planned_runs(case, self.order, self.references_on(case), known, self.counts)
        return sum(map(self.run_s, runs))

    def runner(self, tick, keep):
        """The search's run: one step, shown on the clock, its record journaled."""
        from lazymlx.evals.runner import run_mode

        def run(step):
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


def _pace(model, tokenizer, case, cache):
    """The model's pace on this machine from stock on `case`: its run is the case's baseline
    record when the cache lacks it (returned to keep), else stock runs it again, timed."""
    from lazymlx.evals.outcome import BASELINE_STRATEGY
    from lazymlx.evals.runner import run_case, run_mode
    from lazymlx.evals.search import Speed

    record = None
    if cache.get(case) is None:
        record = run_mode(model, tokenizer, case, BASELINE_STRATEGY, cache)
        timed = record
    else:
        timed = run_case(model, tokenizer, case, None)
    decode = 1 / timed.generation_tps if timed.generation_tps > 0 else 0.0
    return Speed(timed.ttft_s / max(timed.prompt_tokens, 1), decode), record


def _rests_on(plan, records, speed, elapsed_s: float) -> dict:
    """What a search's choice rests on: its cases, lengths and families, stock's right
    answers, where each candidate stands, and whether it stopped at the time budget."""
    from lazymlx.evals.search import next_run, standing

    lengths: dict[int, int] = {}
    for _, length, _ in plan.cases:
        lengths[length] = lengths.get(length, 0) + 1
    families = list(dict.fromkeys(family for family, _, _ in plan.cases))
    left = next_run(plan, records)
    return {
        "rests_on": f"{len(plan.cases)} cases ("
        + ", ".join(f"{n} at {length}" for length, n in sorted(lengths.items()))
        + f") in {len(families)} families: {', '.join(families)}",
        "pace": f"stock at {1 / speed.prompt_s:.0f} prompt tok/s"
        + (f", {1 / speed.decode_s:.1f} tok/s decoding" if speed.decode_s else "")
        + " on the first case",
        "spent": f"{elapsed_s / 60:.1f} min, {len(records)} runs",
        "stopped": None if left is None else f"at the time budget, before {left[1]} on {left[0]}",
        "search": standing(plan, records),
    }


def _announce(advance):
    """A runner's on_run for a progress bar: the case and mode about to run."""
    return lambda case, mode: advance(f"{case.family} {case.length} #{case.seed} {mode}")


def _interval(value) -> str:
    return "—" if value is None else f"[{value[0]:+.3f}, {value[1]:+.3f}]"


def _share(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


CALIBRATE_COLUMNS: list[Column] = [
    ("mode", "candidate", str),
    ("compute_fraction", "work vs stock", percent),
    ("speedup", "TTFT speedup", lambda v: "—" if v is None else ratio(v)),
    ("cases", "cases", str),
    ("kept_share", "kept", _share),
    ("worst_length_share", "worst length", _share),
    ("worst_length_bar", "its bar", _share),
    ("worst_family", "worst family", str),
    ("worst_family_share", "its share", _share),
    ("worst_family_bar", "its bar", _share),
    ("worst_open", "worst open group", str),
    ("worst_open_value", "its mean", lambda v: "—" if v is None else f"{v:.3f}"),
    ("worst_open_bar", "its bar (stock, 4-bit)", lambda v: "—" if v is None else f"{v:.3f}"),
    ("worst_open_interval", "vs 4-bit [90% CI]", _interval),
    ("new_loops", "new loops", str),
    ("meets_default", "default's bar", yes_no),
    ("meets_fast", "fast's bar", yes_no),
]


PerLength = Annotated[
    float,
    typer.Option("--per-length", min=0.0, max=1.0, help="Answers a default keeps at every length."),
]
PerFamily = Annotated[
    float,
    typer.Option("--per-family", min=0.0, max=1.0, help="Answers a default keeps in every family."),
]
FastBar = Annotated[
    float, typer.Option("--fast", min=0.0, max=1.0, help="Answers the fast trade keeps overall.")
]
PresetName = Annotated[
    str,
    typer.Option(
        "--name", help="Save the choice as this preset (and the trades as NAME-gentle, NAME-fast)."
    ),
]
CalibrationLengths = Annotated[
    str, typer.Option("--lengths", "-l", help="Calibration context lengths.")
]
CalibrationFamilies = Annotated[
    str, typer.Option("--families", "-f", help="Calibration task families.")
]
CalibrationCases = Annotated[
    int | None,
    typer.Option("--cases", "-c", min=1, help="Cases per family and length (default: suite's)."),
]
Candidates = Annotated[
    str | None,
    typer.Option(
        "--candidates",
        help="Run only these candidates (comma-separated), e.g. to add cases for the ones "
        "still in contention; one that misses a case is shown but not chosen. A schedule "
        "followed by ' sparse' (decode without revival) runs only when named here, and so "
        "does any other schedule written like the listed ones ('0.3@24% 0.2@57%').",
    ),
]
Minutes = Annotated[
    float | None,
    typer.Option(
        "--minutes",
        min=0.1,
        help="A time budget: the case set is sized to fit it at the model's speed on this "
        "machine (timed on the first case), and the search stops at it.",
    ),
]
CalibrationRecords = Annotated[
    str | None,
    typer.Option("--records", help="Re-decide from an earlier run's --output json or --journal."),
]
Save = Annotated[bool, typer.Option("--save/--no-save", help="Save the chosen presets.")]
ReferenceBar = Annotated[
    bool,
    typer.Option(
        "--reference/--no-reference",
        help="Judge exact answers against the 8-bit reference (stock with 8-bit round-tripped "
        "weights): the bar at a length or family is the lower of yours and what the reference "
        "keeps there. Open answers are always judged against the 4-bit reference.",
    ),
]
Ship = Annotated[
    bool,
    typer.Option(
        "--ship",
        help="A registry model's maintainers: write the choice into lazymlx's own data as "
        "the model's default and fast (lazymlx/engine/calibrated/MODEL.json).",
    ),
]


def calibrate(
    model: Model = DEFAULT_MODEL,
    per_length: PerLength = 0.97,
    per_family: PerFamily = 0.90,
    fast: FastBar = 0.90,
    name: PresetName = "calibrated",
    lengths: CalibrationLengths = CALIBRATION_LENGTHS,
    families: CalibrationFamilies = "all",
    cases: CalibrationCases = None,
    candidates: Candidates = None,
    baselines: Baselines = None,
    minutes: Minutes = None,
    journal: Journal = None,
    resume: Resume = False,
    records: CalibrationRecords = None,
    save: Save = True,
    reference: ReferenceBar = True,
    ship: Ship = False,
    output: Output = "md",
) -> None:
    """Choose a default on calibration cases: the fastest candidate keeping the baseline's answers
    (the bar relative to the 8-bit reference).

    It runs the cheapest work first and stops when the answer is known: stock mlx-lm (a
    registry model's answers are cached) and the 8-bit reference (--no-reference skips it) once
    on every calibration case (by default 2 per family at 512, 3 at 1k and 2k, 1 at 4k and 8k),
    then the candidate schedules (each bare and with a floor of 1,024 kept tokens) one at a time, least work first, each dropped as soon as its losses can
    no longer meet the bar; the first to meet it on every case ends the search. If none does,
    each goes on behind a gate (the shorter lengths run whole) and the lowest gate one meets
    gives the default. That is stock
    and the reference on every case plus about three candidate passes (Qwen2.5-Coder's
    calibration: 32% of the prompt steps of every candidate on every case). On 2 CPU cores
    stock Qwen2.5-Coder-0.5B takes about 23 s per 1k prompt tokens, so its default cases
    (512-8k) take 8 to 10 hours there: --minutes N sizes the cases to fit N minutes at the pace
    timed on the first case (cached answers cost nothing) and stops there, saying what the
    choice rests on and which cases did not fit (--minutes 10 with the lengths 1k-8k: 4
    minutes, 11 cases at 1k). Ctrl-C stops it, keeping every finished run; --journal F with --resume goes on (without
    --minutes, adding the cases a budget left out).
    """
    from lazymlx.evals.calibrate import Bar, choose
    from lazymlx.evals.records import read_records, records_as_dicts

    check_format(output)
    bar = Bar(per_length, per_family, fast)
    if minutes is not None and records is not None:
        raise LazymlxError("--minutes sizes a run; --records re-decides one without running")
    if records is not None:
        head, recorded = read_records(records)
    else:
        only = None if candidates is None else [c.strip() for c in candidates.split(",")]
        recorded, head = _search(
            model, families, lengths, cases, only, baselines, journal, resume, reference, bar,
            minutes,
        )  # fmt: skip
    result = choose(recorded, bar)
    head |= {"bar": vars(bar), "chosen": result.chosen, "fast": result.fast}
    emit(output, head, result.frontier, CALIBRATE_COLUMNS, cases=records_as_dicts(recorded))
    _check_chosen(result, bar)
    if save:
        _save_choice(head.get("model", model), head, result, bar, name, ship)


def _check_chosen(result, bar) -> None:
    """Refuse a search that chose nothing: no candidate met the bar for a default or a fast
    trade."""
    if result.chosen is None and result.fast is None:
        raise LazymlxError(
            f"no candidate kept {bar.per_length:.0%} of the baseline's answers at every length "
            f"and {bar.per_family:.0%} in every family (behind any gate), nor "
            f"{bar.fast_overall:.0%} overall on every case it ran; lower the bar, add cases, or give it more time (--journal with "
            "--resume goes on)"
        )


def _save_choice(model: str, head: dict, result, bar, name: str, ship: bool) -> None:
    """Save the chosen presets as the user's NAME, NAME-gentle and NAME-fast, or (ship) write
    them into lazymlx's own data as a registry model's default, gentle and fast, each with how
    it was chosen. Where no candidate met the default's bar the default runs whole, and gentle
    is half of fast's pruning."""
    from lazymlx.engine.presets import resolve_preset, save_preset, ship_preset
    from lazymlx.evals.calibrate import candidate_config, gentler
    from lazymlx.models.registry import REGISTRY

    if ship and model not in REGISTRY:
        raise LazymlxError(f"--ship writes a registry model's presets; {model} is not one")
    default, gentle = resolve_preset("default", model), resolve_preset("gentle", model)
    day = head.get("date") or datetime.date.today().isoformat()  # today's when re-deciding
    names = ("default", "gentle", "fast") if ship else (name, f"{name}-gentle", f"{name}-fast")
    chosen = {"default": result.chosen or ("keep-all" if ship else None), "fast": result.fast}
    made = {key: candidate_config(default, c, gentle) for key, c in chosen.items() if c is not None}
    base = made["default"] if result.chosen else made.get("fast")
    if base is not None:
        made["gentle"] = gentler(base)
    keep = ship_preset if ship else save_preset
    for preset, key in zip(names, ("default", "gentle", "fast"), strict=True):
        if key not in made:
            continue
        details = {
            "candidate": chosen.get(key) or f"gentler({result.chosen or result.fast})",
            "bar": vars(bar),
            "date": day,
            "how": _how(head, key, result),
        }
        path = keep(model, preset, made[key], details)
        err.print(
            f"[green]saved:[/] preset {preset!r} ({details['candidate']}) for "
            f"{head.get('model', model)} in {path}; use it with --lazy {preset}"
        )


def _how(head: dict, preset: str, result) -> str:
    """How a shipped preset was chosen, from the run's header: the rule, and what it rests on."""
    rule = {
        "default": "the fastest candidate meeting the default's bar"
        if result.chosen
        else "every prompt whole: no candidate met the default's bar",
        "gentle": "half the pruning of "
        + ("the default" if result.chosen else "the fast trade")
        + " (lazymlx.evals.calibrate.gentler)",
        "fast": "the fastest candidate keeping the fast trade's share of the exact answers",
    }[preset]
    rests = head.get("rests_on") or head.get("records", "its records")
    return f"lazymlx calibrate: {rule}, on {rests}."
