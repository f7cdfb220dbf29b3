"""`lazymlx bench`, `eval` and `calibrate`: thin commands over lazymlx.evals.timing, evaluation and calibration."""

from __future__ import annotations

from typing import Annotated

import typer

from lazymlx.cli.console import err
from lazymlx.cli.loading import Parallel, in_group, join_parallel, load_model
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


Baselines = Annotated[
    str | None,
    typer.Option("--baselines", help="Baseline cache file to read and add to (default: yours)."),
]


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
CHAIN_COLUMNS: list[Column] = [
    *BENCH_COLUMNS[:1],
    ("ranks", "ranks", str),
    *BENCH_COLUMNS[1:],
    ("vs_one_process", "TTFT vs 1 process", lambda v: "—" if v is None else ratio(v)),
    ("same_as_one_process", "= 1 process", yes_no),
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
    from lazymlx.evals.timing import against_one_process, beside_the_chain, run_header
    from lazymlx.evals.timing import bench as run_bench

    check_format(output)
    lengths = parse_lengths(prompt_len)
    names, compares = _bench_presets(lazy, model)
    presets = [strategy(name, model) for name in names]
    ranks = _bench_group(parallel, model, presets, lengths)
    loaded, tokenizer = load_model(model)
    strategies, where = beside_the_chain(loaded, presets, ranks)
    total = len(lengths) * (1 + len(strategies)) * (repeats + 1)
    with run_progress(total) as advance:
        rows = run_bench(
            loaded, tokenizer, lengths, strategies, prompt, gen_len, repeats, on_run=advance,
            where=where,
        )  # fmt: skip
    head = run_header(
        model, presets, compares=compares, prompt=prompt, gen_len=gen_len, repeats=repeats,
        warmup="1 per mode, at the timed length", **_parallel_note(parallel, ranks),
    )  # fmt: skip
    columns = CHAIN_COLUMNS if ranks else BENCH_COLUMNS
    emit(output, head, against_one_process(rows, ranks), columns)


def _bench_presets(lazy: str | None, model: str) -> tuple[list[str], str]:
    """The presets a bench times, and the header's line on what it compares and why: those
    --lazy names, or with none every preset of the model's that prunes (default, gentle, fast
    and any it ships or `lazymlx calibrate` saved for it), since a preset that runs every
    prompt whole (a registry model's default today) would time stock against itself."""
    from lazymlx.evals.timing import pruning_presets

    if lazy is not None:
        return _presets(lazy), "stock mlx-lm beside the presets --lazy names"
    pruning, whole = pruning_presets(model)
    compares = (
        f"stock mlx-lm beside every preset that prunes on {model} ({', '.join(pruning)}), "
        "to show what each saves"
    )
    if whole:
        them = "it runs" if len(whole) == 1 else "they run"
        compares += f"; left out: {', '.join(whole)} ({them} every prompt whole: stock's work)"
    return pruning, compares


def _bench_group(parallel: str, model: str, presets, lengths: list[int]) -> int:
    """With --parallel context under mlx.launch: the chain's size, once joined (the other ranks
    follow rank 0's prompt steps and end here), after refusing in one line what a chain can't
    time; else 0 (one process, or a tensor-parallel group, which bench runs as it is)."""
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


def _parallel_note(parallel: str, ranks: int) -> dict:
    """The header's line on where the rows ran (none: one process)."""
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
    from lazymlx.evals.evaluation import evaluate_model
    from lazymlx.evals.records import read_records

    check_format(output)
    if records is not None:
        _emit_eval(output, *read_records(records))
        return
    done, head = evaluate_model(
        model, _presets(lazy), families=families, split=split, lengths=lengths,
        cases=cases, right_only=right_only, reference=reference, baselines=baselines,
        journal=journal, resume=resume, progress=run_progress, load=load_model,
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
    from lazymlx.evals.calibrate import Bar
    from lazymlx.evals.calibration import calibrate_model, check_chosen
    from lazymlx.evals.records import records_as_dicts

    check_format(output)
    bar = Bar(per_length, per_family, fast)
    only = None if candidates is None else [c.strip() for c in candidates.split(",")]
    done = calibrate_model(
        model, lengths=lengths, families=families, cases=cases, candidates=only, bar=bar,
        reference=reference, minutes=minutes, journal=journal, resume=resume,
        baselines=baselines, records=records, progress=clock_progress, load=load_model,
    )  # fmt: skip
    head, choice = done.head, done.choice
    emit(output, head, choice.frontier, CALIBRATE_COLUMNS, cases=records_as_dicts(choice.records))
    check_chosen(choice, bar)
    if save:
        _save(head.get("model", model), head, choice, bar, name, ship)


def _save(model: str, head: dict, choice, bar, name: str, ship: bool) -> None:
    """The chosen presets saved (calibration.save_choice), a line for each."""
    from lazymlx.evals.calibration import save_choice

    for saved in save_choice(model, head, choice, bar, name, ship):
        err.print(
            f"[green]saved:[/] preset {saved.preset!r} ({saved.candidate}) for {model} in "
            f"{saved.path}; use it with --lazy {saved.preset}"
        )
