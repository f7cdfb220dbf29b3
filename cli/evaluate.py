"""`lazymlx eval`: answers kept per task family and length by presets, against stock mlx-lm
(the run is lazymlx/evals/evaluation.py, the tally lazymlx/evals/summary.py)."""

from __future__ import annotations

from typing import Annotated

import typer

from lazymlx.cli import options
from lazymlx.cli.loading import load_model
from lazymlx.cli.report import Column, check_format, emit, percent, ratio, run_progress
from lazymlx.models.registry import DEFAULT_MODEL


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
        help="Presets to evaluate next to the baseline, comma-separated, or rules written as "
        "calibrate's candidates ('mass0.8 1@24% 1@57% least0.25 point0.5 sparse'); none: stock "
        "alone.",
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
    model: options.Model = DEFAULT_MODEL,
    cases: EvalCases = None,
    baselines: options.Baselines = None,
    journal: options.Journal = None,
    resume: options.Resume = False,
    reference: ReferencesBeside = False,
    right_only: RightOnly = False,
    records: EvalRecords = None,
    output: options.Output = "md",
) -> None:
    """Answers kept per task family and length by LazyLLM presets, against stock mlx-lm."""
    from lazymlx.evals.evaluation import evaluate_model
    from lazymlx.evals.records import read_records

    check_format(output)
    if records is not None:
        _emit_eval(output, *read_records(records))
        return
    done, head = evaluate_model(
        model, options.preset_list(lazy), families=families, split=split, lengths=lengths,
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
