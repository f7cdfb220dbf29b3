"""`lazymlx calibrate` as a call: a model's default chosen on its calibration cases, and saved.

The CLI parses its options and prints the frontier; this runs the search, so an app can
calibrate a model from Python and show its progress its own way:

    from lazymlx.evals.calibration import calibrate_model

    done = calibrate_model("qwen2.5-coder-0.5b", lengths="1k,2k", minutes=10, save="calibrated")
    print(done.choice.chosen, done.choice.fast, done.head["rests_on"])

What runs, and in what order, is search_plan.py's (stock and the references on every case, then the
candidates cheapest first, each dropped once it cannot meet the bar); what is chosen is
choice.py's `choose`; this module loads the model, makes the cases, paces the machine, keeps
the journal and saves the presets.
"""

from __future__ import annotations

import datetime
import json
import time
from dataclasses import dataclass
from pathlib import Path

import mlx.nn as nn
from mlx_lm.tokenizer_utils import TokenizerWrapper

from lazymlx.engine.presets import resolve_preset, save_preset, ship_preset, shipped_file
from lazymlx.errors import LazymlxError
from lazymlx.evals.baselines import BaselineCache
from lazymlx.evals.cases import Case, suite_counts
from lazymlx.evals.choice import (
    SCHEDULES,
    Bar,
    Calibration,
    CaseId,
    candidate_config,
    case_id,
    choose,
    gentler,
    prunes_here,
)
from lazymlx.evals.families import CHAT_FAMILIES, FAMILIES, OPEN, OPEN_TOKENS
from lazymlx.evals.outcome import run_once
from lazymlx.evals.records import BASELINE, Record, read_records
from lazymlx.evals.reference import REFERENCE_BITS
from lazymlx.evals.runner import run_case, run_mode
from lazymlx.evals.search_plan import (
    Plan,
    Speed,
    by_work,
    calibration_minutes,
    fit,
    next_run,
    run_order,
    run_search,
    standing,
)
from lazymlx.evals.search_state import CalibrationSearch
from lazymlx.evals.strategies import BASELINE_STRATEGY, check_preset_name
from lazymlx.evals.suite import Loader, Progress, journal_writer, load_suite, quietly
from lazymlx.evals.timing import run_header
from lazymlx.lengths import CALIBRATION_LENGTHS, parse_lengths
from lazymlx.models.adapters import adapter_for
from lazymlx.models.loading import load as load_model
from lazymlx.models.registry import REGISTRY


@dataclass(frozen=True)
class SavedPreset:
    """A preset a calibration saved: its name, the candidate it is, and the file it is in."""

    preset: str
    candidate: str
    path: Path


@dataclass
class Calibrated:
    """A calibration's outcome: the choice (its frontier, default, fast trade and records), the
    run's header (what the choice rests on, what a budget left out, the pace, each candidate's
    standing) and the presets saved."""

    head: dict
    choice: Calibration
    saved: list[SavedPreset]


def calibrate_model(
    model: str,
    *,
    lengths: str = CALIBRATION_LENGTHS,
    families: str = "all",
    cases: int | None = None,
    candidates: list[str] | None = None,
    bar: Bar | None = None,
    reference: bool = True,
    minutes: float | None = None,
    journal: str | None = None,
    resume: bool = False,
    baselines: str | None = None,
    records: str | None = None,
    save: str | None = None,
    ship: bool = False,
    progress: Progress = quietly,
    load: Loader = load_model,
) -> Calibrated:
    """Choose a default for `model` on its calibration cases, as `lazymlx calibrate` does (its
    options, by the same names, in docs/usage.md): `minutes` fits the search to a time budget,
    `journal` keeps every record as it comes (`resume` goes on from it), `records` re-decides
    an earlier run without running anything. `save` names the presets to save the choice as
    (NAME, NAME-gentle, NAME-fast; None saves nothing) and `ship` writes a registry model's
    own; either refuses a search that chose nothing. `progress` is told the search's expected
    seconds, then each run as it starts; `load` loads the model (lazymlx.load). `bar`: what
    the default and the fast trade must keep (calibrate.Bar's defaults unless given)."""
    bar = bar or Bar()
    if minutes is not None and records is not None:
        raise LazymlxError("--minutes sizes a run; --records re-decides one without running")
    if records is not None:
        head, recorded = read_records(records)
    else:
        recorded, head = _search(
            model, families, lengths, cases, candidates, baselines, journal, resume, reference,
            bar, minutes, progress, load,
        )  # fmt: skip
    choice = choose(recorded, bar)
    head |= {"bar": vars(bar), "chosen": choice.chosen, "fast": choice.fast}
    head |= _choice_said(choice, bar)
    saved = []
    if save is not None or ship:
        check_chosen(choice, bar)
        saved = save_choice(head.get("model", model), head, choice, bar, save, ship)
    return Calibrated(head, choice, saved)


def _search(
    model, families, lengths, cases, only, baselines, journal, resume, reference, bar, minutes,
    progress, load,
):  # fmt: skip
    """Calibration's search (lazymlx/evals/search_plan.py) on the calibration split: stock and the
    reference on every case, then candidates cheapest first, each dropped once it cannot meet
    the bar; with `minutes` the case set sized to fit from stock's pace on the first case, and
    the search stopped at the budget. The records (a resumed journal's first) and a header
    saying what the choice rests on."""
    started = time.monotonic()
    run = load_suite(model, families, "calibration", lengths, cases, journal, resume, load)
    search = CalibrationSearch(run, baselines, reference, only)
    wanted = run_order(search.suite)  # every case asked for; a budget may keep fewer
    ids, sized = _resumed_cases(wanted, run.earlier, minutes)
    keep = journal_writer(journal)
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
    with progress(sum(map(search.case_s, ids))) as tick:

        def stop(step) -> bool:
            return deadline is not None and time.monotonic() + search.run_s(step) > deadline

        done = run_search(plan, search.runner(tick, keep), records, stop)
    strategies = list(search.strategies.values())
    head = run_header(model, strategies, split="calibration", minutes=minutes)
    head |= _rests_on(plan, done, search.speed, time.monotonic() - started)
    head |= {"resumed": len(run.earlier)} | _left_out(wanted, ids)
    return done, run.skipped_note(head)


def _resumed_cases(
    ids: tuple[CaseId, ...], earlier: list[Record], minutes: float | None
) -> tuple[tuple[CaseId, ...], bool]:
    """The cases to run, and whether a budget sized them already: a budgeted run that reached
    its candidates goes on with its cases, as sized (stock ran on all of them first); one
    stopped before them never used its sizing and is sized again."""
    sized = minutes is not None and any(r.mode not in (BASELINE, *REFERENCE_BITS) for r in earlier)
    if sized:
        resumed = {case_id(r) for r in earlier if r.mode == BASELINE}
        ids = tuple(c for c in ids if c in resumed)
    return ids, sized


def _left_out(wanted: tuple[CaseId, ...], ids: tuple[CaseId, ...]) -> dict:
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


def _pace(
    model: nn.Module, tokenizer: TokenizerWrapper, case: Case, cache: BaselineCache
) -> tuple[Speed, Record | None]:
    """The model's pace on this machine from stock on `case`: its run is the case's baseline
    record when the cache lacks it (returned to keep), else stock runs it again, timed."""
    record = None
    if cache.get(case) is None:
        record = run_mode(model, tokenizer, case, BASELINE_STRATEGY, cache)
        timed = record
    else:
        timed = run_case(model, tokenizer, case, None)
    decode = 1 / timed.generation_tps if timed.generation_tps > 0 else 0.0
    return Speed(timed.ttft_s / max(timed.prompt_tokens, 1), decode), record


def _rests_on(plan: Plan, records: list[Record], speed: Speed, elapsed_s: float) -> dict:
    """What a search's choice rests on: its cases, lengths and families, stock's right
    answers, where each candidate stands, and whether it stopped at the time budget."""
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


def _choice_said(choice: Calibration, bar: Bar) -> dict:
    """The header's plain words where the choice buys no speed: a default that ran every case
    whole (a gate or floor above these lengths: stock's work), or no fast trade (no candidate
    that prunes kept its share of the answers)."""
    rows = {row["mode"]: row for row in choice.frontier}
    said = {}
    chosen = rows.get(choice.chosen)
    if chosen is not None and not prunes_here(chosen):
        said["chosen_work"] = (
            f"{choice.chosen} ran every case here whole (100% of stock's work): no speed-up "
            "on these cases"
        )
    if choice.fast is None:
        said["no_fast"] = (
            f"no candidate that prunes kept {bar.fast_overall:.0%} of the answers overall, so "
            "there is no fast trade"
        )
    return said


def check_chosen(choice: Calibration, bar: Bar) -> None:
    """Refuse a search that chose nothing: no candidate met the bar for a default or a fast
    trade."""
    if choice.chosen is None and choice.fast is None:
        raise LazymlxError(
            f"no candidate kept {bar.per_length:.0%} of the baseline's answers at every length "
            f"and {bar.per_family:.0%} in every family (behind any gate), nor "
            f"{bar.fast_overall:.0%} overall on every case it ran; lower the bar, add cases, or give it more time (--journal with "
            "--resume goes on)"
        )


def save_choice(
    model: str, head: dict, choice: Calibration, bar: Bar, name: str | None, ship: bool
) -> list[SavedPreset]:
    """Save the chosen presets as the user's NAME, NAME-gentle and NAME-fast, or (ship, which
    needs no name) write them into lazymlx's own data as a registry model's default, gentle and
    fast, each with how it was chosen. Where no candidate met the default's bar the default runs whole, and gentle
    is half of fast's pruning. A shipped fast this run never ran stays (it cannot have beaten it),
    as does the gentle made from it where no candidate met the default's bar."""
    if ship and model not in REGISTRY:
        raise LazymlxError(f"--ship writes a registry model's presets; {model} is not one")
    default, gentle = resolve_preset("default", model), resolve_preset("gentle", model)
    day = head.get("date") or datetime.date.today().isoformat()  # today's when re-deciding
    names = ("default", "gentle", "fast") if ship else (name, f"{name}-gentle", f"{name}-fast")
    for saved_name in names:
        check_preset_name(saved_name)
    chosen = {"default": choice.chosen or ("keep-all" if ship else None), "fast": choice.fast}
    path = shipped_file(model)
    was = json.loads(path.read_text()).get("fast") if ship and path.is_file() else None
    if was and was["calibration"]["candidate"] not in {r.mode for r in choice.records}:
        chosen["fast"] = None  # the shipped fast stays: this run never ran it
    made = {key: candidate_config(default, c, gentle) for key, c in chosen.items() if c is not None}
    base = made["default"] if choice.chosen else made.get("fast")
    if base is not None:
        made["gentle"] = gentler(base)
    keep = ship_preset if ship else save_preset
    saved = []
    for preset, key in zip(names, ("default", "gentle", "fast"), strict=True):
        if key not in made:
            continue
        details = {
            "candidate": chosen.get(key) or f"gentler({choice.chosen or choice.fast})",
            "bar": vars(bar),
            "date": day,
            "how": _how(head, key, choice),
        }
        path = keep(model, preset, made[key], details)
        saved.append(SavedPreset(preset, details["candidate"], path))
    return saved


def _how(head: dict, preset: str, choice: Calibration) -> str:
    """How a shipped preset was chosen, from the run's header: the rule, and what it rests on."""
    rule = {
        "default": "the fastest candidate meeting the default's bar"
        if choice.chosen
        else "every prompt whole: no candidate met the default's bar",
        "gentle": "half the pruning of "
        + ("the default" if choice.chosen else "the fast trade")
        + " (lazymlx.evals.choice.gentler)",
        "fast": "the fastest candidate keeping the fast trade's share of the exact answers",
    }[preset]
    rests = head.get("rests_on") or head.get("records", "its records")
    return f"lazymlx calibrate: {rule}, on {rests}."


def expected_minutes(model: nn.Module, tokenizer: TokenizerWrapper, name: str) -> float:
    """What calibrate_model on its default cases would take here: stock timed on a 256-token
    prompt and four decode steps, times what the search runs (search.calibration_minutes),
    the cheapest candidates built from the model's default and gentle rule."""
    default, gentle = resolve_preset("default", name), resolve_preset("gentle", name)
    adapter = adapter_for(model)  # a windowed model prunes only at its global layers
    layers, ranking = len(adapter.layers), adapter.ranking_layers
    configs = {c: candidate_config(default, c, gentle) for c in SCHEDULES}
    shares = {
        c: lambda n, made=made: made.work_share(n, layers, ranking) for c, made in configs.items()
    }
    lengths = parse_lengths(CALIBRATION_LENGTHS)
    cheapest = [shares[c] for c in by_work(shares, lengths)]
    families = [f for f in FAMILIES if tokenizer.chat_template or f not in CHAT_FAMILIES]
    run = run_once(model, tokenizer, [3 + i % 200 for i in range(256)], 4, None)
    speed = Speed(1 / run.prompt_tps, 1 / run.generation_tps if run.generation_tps else 0.0)
    return calibration_minutes(
        speed,
        suite_counts("calibration", lengths),
        families,
        cheapest,
        lambda family: OPEN_TOKENS if family in OPEN else 16,
    )
