"""`lazymlx calibrate`: a default chosen for a model on its calibration cases, the frontier
printed and the presets saved (the search is lazymlx/evals/calibration.py)."""

from __future__ import annotations

from typing import Annotated

import typer

from lazymlx.cli import options
from lazymlx.cli.console import err
from lazymlx.cli.loading import load_model
from lazymlx.cli.report import Column, check_format, clock_progress, emit, percent, ratio, yes_no
from lazymlx.lengths import CALIBRATION_LENGTHS
from lazymlx.models.registry import DEFAULT_MODEL


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
        "the model's default and fast (lazymlx/engine/calibrated/MODEL.json); a shipped fast "
        "the run never tried stays.",
    ),
]


def calibrate(
    model: options.Model = DEFAULT_MODEL,
    per_length: PerLength = 0.97,
    per_family: PerFamily = 0.90,
    fast: FastBar = 0.90,
    name: PresetName = "calibrated",
    lengths: CalibrationLengths = CALIBRATION_LENGTHS,
    families: CalibrationFamilies = "all",
    cases: CalibrationCases = None,
    candidates: Candidates = None,
    baselines: options.Baselines = None,
    minutes: Minutes = None,
    journal: options.Journal = None,
    resume: options.Resume = False,
    records: CalibrationRecords = None,
    save: Save = True,
    reference: ReferenceBar = True,
    ship: Ship = False,
    output: options.Output = "md",
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
    from lazymlx.evals.calibration import calibrate_model, check_chosen
    from lazymlx.evals.choice import Bar
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
