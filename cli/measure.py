"""`lazymlx bench`, `eval` and `calibrate`: thin commands over lazymlx.bench, evals and calibrate."""

from __future__ import annotations

from typing import Annotated

import typer

from lazymlx.cli.console import err
from lazymlx.cli.report import (
    Column,
    check_format,
    emit,
    percent,
    ratio,
    run_progress,
    seconds,
    yes_no,
)
from lazymlx.errors import LazymlxError
from lazymlx.lengths import parse_lengths
from lazymlx.models.registry import DEFAULT_MODEL

Model = Annotated[
    str, typer.Option("--model", "-m", help="Registry name, model directory, .gguf or hub id.")
]
Output = Annotated[str, typer.Option("--output", "-o", help="md (a table), json or csv.")]


def _presets(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise LazymlxError("no preset given to --lazy; name one or more, e.g. default,off")
    return list(dict.fromkeys(names))


def _header(model: str, strategies, **settings) -> dict:
    """The run's header, with what each preset in it does."""
    from lazymlx.bench import header

    presets = {s.mode: s.config.describe() for s in strategies}
    return header(model, **settings) | {"presets": presets}


def _load(model: str):
    from lazymlx.cli.app import load_model

    return load_model(model)


BENCH_COLUMNS: list[Column] = [
    ("mode", "mode", str),
    ("prompt_tokens", "prompt tokens", str),
    ("ttft_s", "TTFT (s)", seconds),
    ("ttft_std", "± std", seconds),
    ("prompt_tps", "prompt tok/s", lambda v: f"{v:.1f}"),
    ("generation_tps", "gen tok/s", lambda v: f"{v:.1f}"),
    ("peak_memory_gb", "peak GB", seconds),
    ("compute_fraction", "prefill computed", percent),
    ("speedup", "speedup", ratio),
    ("answer_matches_baseline", "= baseline", yes_no),
    ("answer_correct", "answer right", yes_no),
]


def bench(
    prompt_len: Annotated[
        str, typer.Option("--prompt-len", "-l", help="Prompt tokens: 512, 2k, 8k or a list 1k,2k.")
    ] = "2k",
    model: Model = DEFAULT_MODEL,
    lazy: Annotated[
        str,
        typer.Option(
            "--lazy",
            help="Presets to time next to stock mlx-lm, comma-separated: default, off (the engine "
            "keeping all), static, random, or a calibrated one.",
        ),
    ] = "default,off",
    gen_len: Annotated[
        int, typer.Option("--gen-len", "-n", min=1, help="Tokens to generate.")
    ] = 128,
    repeats: Annotated[
        int, typer.Option("--repeats", "-r", min=1, help="Timed runs per row, after one warm-up.")
    ] = 1,
    prompt: Annotated[
        str, typer.Option("--prompt", help="passkey (retrieval, default), random, or a text FILE.")
    ] = "passkey",
    output: Output = "md",
) -> None:
    """Time to first token and more, stock mlx-lm next to LazyLLM presets, on one prompt per length."""
    from lazymlx.bench import bench as run_bench
    from lazymlx.measure import strategy

    check_format(output)
    lengths = parse_lengths(prompt_len)
    strategies = [strategy(name, model) for name in _presets(lazy)]
    loaded, tokenizer = _load(model)
    total = len(lengths) * (1 + len(strategies)) * (repeats + 1)
    with run_progress(total) as advance:
        rows = run_bench(
            loaded, tokenizer, lengths, strategies, prompt, gen_len, repeats, on_run=advance
        )
    head = _header(
        model,
        strategies,
        prompt=prompt,
        gen_len=gen_len,
        repeats=repeats,
        warmup="1 per mode, 256 tokens",
    )
    emit(output, head, rows, BENCH_COLUMNS)


EVAL_COLUMNS: list[Column] = [
    ("task", "task", str),
    ("length", "length", str),
    ("mode", "mode", str),
    ("accuracy", "accuracy", percent),
    ("correct", "right", str),
    ("cases", "cases", str),
    ("answer_agreement", "same answers as baseline", percent),
    ("agreement", "= baseline (first tokens)", percent),
    ("compute_fraction", "prefill computed", percent),
    ("speedup", "speedup", ratio),
]


def evaluate(
    task: Annotated[
        str,
        typer.Option("--task", "-t", help="all, or a list of passkey,needle,multikey,kv,vartrack."),
    ] = "all",
    lengths: Annotated[
        str, typer.Option("--lengths", "-l", help="Prompt lengths, e.g. 1k,2k.")
    ] = "1k",
    lazy: Annotated[
        str,
        typer.Option("--lazy", help="Presets to evaluate next to the baseline, comma-separated."),
    ] = "default",
    model: Model = DEFAULT_MODEL,
    cases: Annotated[
        int, typer.Option("--cases", "-c", min=1, help="Cases per task and length.")
    ] = 5,
    seed: Annotated[int, typer.Option("--seed", help="First case seed.")] = 0,
    agree_tokens: Annotated[
        int, typer.Option("--agree-tokens", min=1, help="Tokens compared with the baseline's.")
    ] = 8,
    output: Output = "md",
) -> None:
    """Accuracy per task and length of stock mlx-lm and LazyLLM presets on the offline suite."""
    from lazymlx.evals.runner import evaluate as run_eval
    from lazymlx.evals.runner import make_cases, records_as_dicts, summarize
    from lazymlx.evals.tasks import parse_tasks
    from lazymlx.measure import strategy

    check_format(output)
    tasks, sizes = parse_tasks(task), parse_lengths(lengths)
    strategies = [strategy(name, model) for name in _presets(lazy)]
    loaded, tokenizer = _load(model)
    suite = make_cases(tokenizer, tasks, sizes, cases, seed)
    with run_progress(len(suite) * (1 + len(strategies))) as advance:
        records = run_eval(
            loaded,
            tokenizer,
            suite,
            strategies,
            agree_tokens,
            on_run=lambda case, mode: advance(f"{case.task} {case.length} #{case.seed} {mode}"),
        )
    rows = summarize(records)
    rows.sort(key=lambda row: (row["task"], row["length"]))
    head = _header(
        model, strategies, cases_per_task=cases, first_seed=seed, agree_tokens=agree_tokens
    )
    emit(output, head, rows, EVAL_COLUMNS, cases=records_as_dicts(records))


CALIBRATE_COLUMNS: list[Column] = [
    ("mode", "strategy: schedule", str),
    ("compute_fraction", "prefill computed", percent),
    ("speedup", "speedup", ratio),
    ("accuracy", "accuracy", percent),
    ("answer_agreement", "same answers as baseline", percent),
    ("agreement", "= baseline (first tokens)", percent),
    ("meets_target", "meets target", yes_no),
]


def calibrate(
    model: Model = DEFAULT_MODEL,
    target: Annotated[
        float,
        typer.Option("--target", min=0.0, max=1.0, help="Agreement with the baseline to reach."),
    ] = 0.97,
    metric: Annotated[
        str,
        typer.Option(
            "--metric",
            help="answers: right exactly where the baseline is; tokens: the first "
            "--agree-tokens tokens equal the baseline's.",
        ),
    ] = "answers",
    name: Annotated[
        str, typer.Option("--name", help="Save the chosen schedule as this preset.")
    ] = "calibrated",
    lengths: Annotated[
        str, typer.Option("--lengths", "-l", help="Calibration prompt lengths.")
    ] = "1k,2k",
    task: Annotated[
        str, typer.Option("--task", "-t", help="Calibration tasks (all or a list).")
    ] = "all",
    cases: Annotated[
        int, typer.Option("--cases", "-c", min=1, help="Cases per task and length.")
    ] = 1,
    selections: Annotated[
        str,
        typer.Option(
            "--selections", help="Also run static,random at each schedule (for the plot)."
        ),
    ] = "attention",
    agree_tokens: Annotated[
        int, typer.Option("--agree-tokens", min=1, help="Tokens compared with the baseline's.")
    ] = 8,
    records: Annotated[
        str | None,
        typer.Option(
            "--records",
            help="Re-decide from an earlier `calibrate --output json` file instead of running.",
        ),
    ] = None,
    save: Annotated[bool, typer.Option("--save/--no-save", help="Save the chosen preset.")] = True,
    output: Output = "md",
) -> None:
    """Find the fastest schedule whose answers agree with the baseline's on calibration cases."""
    from lazymlx.bench import header
    from lazymlx.calibrate import CANDIDATES, METRICS, schedule_label
    from lazymlx.calibrate import calibrate as run_calibration
    from lazymlx.config import SELECTIONS
    from lazymlx.evals.runner import CALIBRATION_SEED, make_cases, records_as_dicts
    from lazymlx.evals.tasks import parse_tasks
    from lazymlx.presets import save_preset

    check_format(output)
    if metric not in METRICS:
        raise LazymlxError(f"unknown --metric {metric!r}; choose one of: {', '.join(METRICS)}")
    chosen_selections = tuple(s.strip() for s in selections.split(",") if s.strip())
    unknown = [s for s in chosen_selections if s not in SELECTIONS]
    if unknown or "attention" not in chosen_selections:
        raise LazymlxError(
            f"--selections takes attention plus any of static, random; got {selections!r}"
        )
    tasks, sizes = parse_tasks(task), parse_lengths(lengths)
    if records is not None:
        head, result = _recorded(records, target, metric)
    else:
        loaded, tokenizer = _load(model)
        suite = make_cases(tokenizer, tasks, sizes, cases, CALIBRATION_SEED)
        runs = len(suite) * (1 + len(CANDIDATES) * len(chosen_selections))
        with run_progress(runs) as advance:
            result = run_calibration(
                loaded,
                tokenizer,
                suite,
                target,
                metric,
                selections=chosen_selections,
                agree_tokens=agree_tokens,
                on_run=lambda case, mode: advance(f"{case.task} {case.length} #{case.seed} {mode}"),
            )
        head = header(
            model, case_count=len(suite), lengths=sizes, tasks=tasks, agree_tokens=agree_tokens
        )
    head |= {"target": target, "metric": metric}
    head["chosen"] = schedule_label(result.chosen) if result.chosen else None
    emit(output, head, result.frontier, CALIBRATE_COLUMNS, cases=records_as_dicts(result.records))
    if result.chosen is None:
        raise LazymlxError(
            f"no candidate schedule reached {metric} agreement {target:.0%} with the baseline; "
            "lower --target or add cases"
        )
    if save:
        keys = ("target", "metric", "case_count", "lengths", "tasks", "date")
        details = {key: head.get(key) for key in keys}
        path = save_preset(head["model"], name, result.chosen, details)
        err.print(
            f"[green]saved:[/] preset {name!r} ({schedule_label(result.chosen)}) for "
            f"{head['model']} in {path}; use it with --lazy {name}"
        )


def _recorded(path: str, target: float, metric: str):
    """The header and re-decided calibration of an earlier run's JSON."""
    import json
    from pathlib import Path

    from lazymlx.calibrate import choose
    from lazymlx.evals.runner import records_from_dicts

    try:
        earlier = json.loads(Path(path).read_text())
        recorded = records_from_dicts(earlier["cases"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise LazymlxError(
            f"cannot read calibration records from {path} ({error}); pass the JSON that "
            "`lazymlx calibrate --output json` printed"
        ) from error
    head = {k: v for k, v in earlier.items() if k not in ("rows", "cases", "chosen")}
    return head, choose(recorded, target, metric)
