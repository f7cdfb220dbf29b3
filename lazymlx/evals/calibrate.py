"""Choosing a default on calibration cases: the fastest candidate that keeps the baseline's answers.

Candidates run on the calibration split (seeds and documents the validation split never uses)
next to the cached baseline and the noise floor (lazymlx/evals/reference.py: stock with its weights
round-tripped through 8 bits). The bar is relative: at every length a default keeps at least
min(`per_length`, the reference's share) of the baseline's right answers, and in every family
pooled over lengths at least min(`per_family`, the reference's share), on the same cases; a
model that answers on near-ties is not asked to be steadier than stock itself. Without a
reference in the records the bar is the plain one. Open-ended families (summaries, questions,
second turns, code completion) are also judged by their mean similarity to stock's answers,
within OPEN_MARGIN of the reference's on the same cases, in every open family and at every
length. Where no candidate meets the bar, each is tried behind a gate (`min_prompt`): the
shorter calibration lengths run whole, so they give stock's answers, and the candidate must
meet the bar with the rest; the lowest gate any candidate meets wins. "Fastest" is ranked by the compute fraction
the engine counts, which is exact and repeatable where wall time on a shared machine is not; the
TTFT speedup is shown beside it. The fastest candidate keeping `fast_overall` of the answers
overall is the `fast` trade; at equal prefill work a sparse-decode candidate ranks first, since
it revives nothing while decoding. Decisions are pure over the records, so an earlier run can be
re-decided without running anything.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from lazymlx.engine.config import FLOOR_TOKENS, PRESETS, LazyConfig, pruning_base
from lazymlx.errors import LazymlxError
from lazymlx.evals.measure import BASELINE, Strategy
from lazymlx.evals.reference import REFERENCE
from lazymlx.evals.runner import NO_IDLE, Record
from lazymlx.evals.scoring import bootstrap_interval
from lazymlx.evals.summary import ALL, summarize

# Candidates built from a model's default (so they keep its scoring and length rules): the
# schedules round 3 of benchmarks/studies/STUDIES.md compared on SmolLM2, a generous first prune
# where early layers rank answers roughly and a hard one where they rank them best, and late
# selection (every token to mid-depth or two thirds of depth, then one hard prune), at depths
# given as fractions so they map onto any model's layers. A name fixes the decode policy, so it
# means one thing whatever the model's default decodes: a schedule alone revives while
# decoding; followed by " sparse" it does not, and decode costs about what stock's does. Sparse
# candidates run only when named, once a schedule is chosen: whether decode revival earns its
# cost is a question about that schedule, and each 4k case is minutes here. Each schedule comes
# bare and with a floor of 1,024 tokens past each prune: on open-ended answers at 512 and 1k
# tokens every bare schedule tried loops or drifts (benchmarks/README.md, "SmolLM2's floor").
SCHEDULES = tuple(
    schedule + floor
    for schedule in (
        "0.2@67%",
        "0.3@57%",
        "0.6@24% 0.3@57%",
        "0.5@24% 0.3@57%",
        "0.4@24% 0.4@57%",
        "0.6@24% 0.2@50%",
        "0.2@50%",
    )
    for floor in ("", f" min{FLOOR_TOKENS}")
)
SPARSE = " sparse"
CANDIDATES = ("default", *(name + policy for name in SCHEDULES for policy in ("", SPARSE)))
_STEP = re.compile(r"(?P<ratio>\d*\.?\d+)@(?P<depth>\d+(?:\.\d+)?)%")
_FLOOR = re.compile(r"min(?P<tokens>\d+)")  # min256: at least 256 tokens on past each prune
# "X from3840": candidate X with prompts under 3,840 tokens run whole (its min_prompt)
_GATE = re.compile(r"(?P<candidate>.+) from(?P<tokens>\d+)")
GATE_STEP = 256  # gates are whole multiples of this many tokens


def gated_name(candidate: str, tokens: int) -> str:
    """A candidate behind a gate, by name: prompts under `tokens` tokens run whole."""
    return f"{candidate} from{tokens}"


def gate_tokens(name: str) -> int | None:
    """The gate a candidate's name sets (None: it has none)."""
    gate = _GATE.fullmatch(name)
    return None if gate is None else int(gate["tokens"])


def candidate_configs(default: LazyConfig) -> dict[str, LazyConfig]:
    """Every listed candidate's config, built from a model's default; a default that prunes
    nothing is no candidate (its answers are stock's)."""
    names = [name for name in CANDIDATES if default.prunes or name != "default"]
    return {name: candidate_config(default, name) for name in names}


def candidate_config(default: LazyConfig, name: str) -> LazyConfig:
    """A candidate by name: "default", "off", or a schedule written as the listed ones are ("0.3@24%
    0.2@57%": keep 30% at 24% of depth, then 20% of those at 57%; "min256" after it keeps at
    least 256 tokens at each prune, none the default's floor; " sparse" then decodes without
    revival; " from3840" last runs prompts under 3,840 tokens whole), listed or not, so a model
    whose answers survive harder pruning can be tried on it."""
    if name == "off":  # what a model ships where no candidate holds: every prompt whole
        return PRESETS["keep-all"]
    gate = _GATE.fullmatch(name)
    if gate:
        chosen = candidate_config(default, gate["candidate"])
        return replace(chosen, min_prompt=int(gate["tokens"]))
    if name == "default":
        return default
    sparse = name.endswith(SPARSE)
    words = name.removesuffix(SPARSE).split()
    floor = _FLOOR.fullmatch(words[-1]) if words else None
    steps = [_STEP.fullmatch(step) for step in words[: -1 if floor else None]]
    if not steps or not all(steps):
        raise LazymlxError(
            f"no calibration candidate {name!r}; candidates are: {', '.join(CANDIDATES)}, or a "
            "schedule written like them, e.g. '0.3@24% 0.2@57% min256 sparse from2048'"
        )
    pairs = tuple((float(step["depth"]) / 100, float(step["ratio"])) for step in steps)
    return replace(
        pruning_base(default),
        schedule=pairs,
        decode="sparse" if sparse else "revive",
        min_keep=int(floor["tokens"]) if floor else 0,
    )


def candidate_strategies(default: LazyConfig, only: list[str] | None = None) -> list[Strategy]:
    """The candidates to run, `only` those named if given. A default that equals a candidate (a
    calibrated model's) runs once, under the candidate's name, sparse or not: each run of a 4k
    case is minutes of CPU here."""
    made = candidate_configs(default)
    twin = next((n for n, config in made.items() if n != "default" and config == default), None)
    if only is None:  # the schedules, and the default under its twin's name if it has one
        only = [name for name in made if not name.endswith(SPARSE) or name == twin]
    run = {name: candidate_config(default, name) for name in only}
    if twin in run:
        run.pop("default", None)
    return [Strategy(name, config) for name, config in run.items()]


@dataclass(frozen=True)
class Bar:
    """What a default must keep of the baseline's right answers, and what `fast` must."""

    per_length: float = 0.97
    per_family: float = 0.90
    fast_overall: float = 0.90


@dataclass
class Calibration:
    frontier: list[dict]  # one row per candidate (the baseline first)
    chosen: str | None  # the fastest candidate meeting the default's bar
    fast: str | None  # the fastest keeping bar.fast_overall overall
    records: list[Record]


CaseId = tuple[str, int, int]  # family, length, seed


def case_id(record: Record) -> CaseId:
    return (record.family, record.length, record.seed)


def counting(records: Iterable[Record]) -> set[CaseId]:
    """The cases whose candidate runs can move the bar: stock answers right, or the answer is
    open-ended (judged against stock's own). Elsewhere a candidate's answer counts nowhere, so
    the search (search.py) does not run it there and `choose` does not ask for it."""
    return {
        case_id(r)
        for r in records
        if r.mode == BASELINE and (r.baseline_correct or r.score is not None)
    }


Check = tuple[object, dict, float]  # a group (its length or family), its summary row, its bar


def default_checks(
    rows: list[dict], mode: str, bar: Bar = Bar()
) -> tuple[list[Check], list[Check]]:
    """The groups the default's bar judges in `mode`'s summary rows: each length (families
    pooled) against min(per_length, the reference's share there), and each scored family
    (pooled over lengths, or at its one length) against min(per_family, the reference's share).
    A reference share is a floor only for a group whose right answers the reference all ran:
    one run on fewer cases says nothing about the others."""
    reference = {(r["family"], r["length"]): r for r in rows if r["mode"] == REFERENCE}

    def needed(plain: float, group: dict) -> float:
        floor = reference.get((group["family"], group["length"]))
        if floor is None or floor["kept_share"] is None:
            return plain
        if floor["baseline_right"] < group["baseline_right"]:
            return plain
        return min(plain, floor["kept_share"])

    mine = [r for r in rows if r["mode"] == mode]
    pooled = [r for r in mine if r["family"] == ALL and r["length"] != ALL]
    families = [r for r in mine if r["family"] != ALL and r["length"] == ALL] or [
        r for r in mine if r["family"] != ALL
    ]
    return (
        [(r["length"], r, needed(bar.per_length, r)) for r in pooled],
        [
            (r["family"], r, needed(bar.per_family, r))
            for r in families
            if r["kept_share"] is not None
        ],
    )


# Open-ended answers (lazymlx/evals/families.py, OPEN): a default's mean similarity to stock's
# answers, in every open family pooled over lengths and at every length pooled over the open
# families, is at most this far below the noise floor's on the same cases (stock itself scores
# 1 where no reference ran).
OPEN_MARGIN = 0.10


def open_gaps(
    records: list[Record], mode: str, by_length: bool = False
) -> dict[str | int, tuple[float, tuple[float, float]]]:
    """Per open family (by_length: per length, the open families pooled): the mean of (mode's
    score - the reference's) over the cases both ran, and its paired 95% bootstrap interval
    (cases resampled within each length, or each family)."""
    floor = {(r.family, r.length, r.seed): r.score for r in records if r.mode == REFERENCE}
    strata: dict[str | int, dict[str | int, list[float]]] = {}
    for r in records:
        if r.mode != mode or r.score is None:
            continue
        reference = floor.get((r.family, r.length, r.seed), 1.0 if not floor else None)
        if reference is not None:
            group, stratum = (r.length, r.family) if by_length else (r.family, r.length)
            strata.setdefault(group, {}).setdefault(stratum, []).append(r.score - reference)
    gaps = {}
    for group, within in strata.items():
        values = [v for stratum in within.values() for v in stratum]
        interval = bootstrap_interval(list(within.values()), resamples=2000)
        gaps[group] = (sum(values) / len(values), interval)
    return gaps


def _open_groups(records: list[Record], mode: str) -> dict[str, tuple[float, tuple]]:
    """Every open-ended group the margin judges, by name: each family, and each length."""
    families = open_gaps(records, mode)
    lengths = open_gaps(records, mode, by_length=True)
    return {**families, **{f"{length} tokens": gap for length, gap in lengths.items()}}


def margin(check: Check) -> float:
    """How far a group sits above (or below) its bar; a group with no right answer at 0."""
    _, row, needed = check
    return (row["kept_share"] or 0.0) - needed


def _is_candidate(mode: str) -> bool:
    """Whether a mode is a candidate the bar applies to: not stock, not the reference, and a
    multi-turn run after completion (not its no-idle twin)."""
    return mode not in (BASELINE, REFERENCE) and not mode.endswith(NO_IDLE)


def _frontier_row(
    records: list[Record], rows: list[dict], mode: str, bar: Bar, every_case: set[CaseId]
) -> dict:
    """One mode's row of the frontier: its work, speed and answers kept overall, its worst
    length, family and open-ended family against their bars, and which bars it meets."""
    # a candidate run on only some of the cases that count (dropped by the search, added
    # later with --candidates) is shown but not chosen: its share would be over easier
    # ground than the others'
    ran = {case_id(r) for r in records if r.mode == mode}
    covers = not _is_candidate(mode) or ran >= every_case
    pooled = [r for r in rows if r["mode"] == mode and r["family"] == ALL]
    overall = next((r for r in pooled if r["length"] == ALL), pooled[0])
    lengths, families = default_checks(rows, mode, bar)
    worst_length, worst_family = (
        min(lengths, key=margin),
        min(families, key=margin, default=None),
    )
    gaps = _open_groups(records, mode) if mode != REFERENCE else {}
    worst_open = min(gaps.items(), key=lambda item: item[1][0], default=None)
    open_ok = all(gap >= -OPEN_MARGIN - 1e-9 for gap, _ in gaps.values())
    return {
        "mode": mode,
        "compute_fraction": overall["compute_fraction"],
        "speedup": overall["speedup"],
        "kept": overall["kept"],
        "baseline_right": overall["baseline_right"],
        "kept_share": overall["kept_share"],
        "worst_length": worst_length[0],
        "worst_length_share": worst_length[1]["kept_share"],
        "worst_length_bar": worst_length[2],
        "worst_family": worst_family[0] if worst_family else None,
        "worst_family_share": worst_family[1]["kept_share"] if worst_family else None,
        "worst_family_bar": worst_family[2] if worst_family else None,
        "worst_open_family": worst_open[0] if worst_open else None,
        "worst_open_gap": worst_open[1][0] if worst_open else None,
        "worst_open_interval": worst_open[1][1] if worst_open else None,
        "cases": len(ran),
        "meets_default": covers and open_ok and all(margin(c) >= -1e-9 for c in lengths + families),
        "meets_fast": covers and (overall["kept_share"] or 0) >= bar.fast_overall - 1e-9,
    }


def _fastest(frontier: list[dict], key: str) -> str | None:
    """The candidate with the least work among those meeting `key`'s bar (at equal prefill
    work sparse decode is faster, since it revives nothing)."""
    passing = [row for row in frontier if _is_candidate(row["mode"]) and row[key]]
    best = min(
        passing,
        key=lambda row: (row["compute_fraction"], SPARSE.strip() not in row["mode"].split()),
        default=None,
    )
    return None if best is None else best["mode"]


def gates(records: Iterable[Record]) -> dict[int, int]:
    """Each calibration length but the shortest → the gate (min_prompt) that prunes its prompts
    and longer ones and runs the shorter lengths' whole: its shortest stock prompt rounded down
    to GATE_STEP tokens, above every shorter length's prompts."""
    stock = [r for r in records if r.mode == BASELINE]
    lengths = sorted({r.length for r in stock})
    made = {}
    for shorter, length in zip(lengths, lengths[1:], strict=False):
        lowest = min(r.prompt_tokens for r in stock if r.length == length)
        below = max(r.prompt_tokens for r in stock if r.length <= shorter)
        made[length] = max(lowest // GATE_STEP * GATE_STEP, below + 1)
    return made


def gated(records: Iterable[Record], mode: str, length: int, tokens: int) -> list[Record]:
    """Candidate `mode` behind a gate, as records: stock's own below `length` (those prompts run
    whole, so they give stock's answers at stock's time) and the candidate's from `length` up
    (its prompts there clear the gate and prune as they did bare)."""
    name, stock = gated_name(mode, tokens), {}
    for r in records:
        if r.mode == BASELINE and r.length < length:
            stock.setdefault(case_id(r), replace(r, mode=name, baseline_ttft_s=r.ttft_s))
        elif r.mode == mode and r.length >= length:
            stock[case_id(r)] = replace(r, mode=name)
    return list(stock.values())


def _gated_rows(records: list[Record], bar: Bar, every_case: set[CaseId]) -> list[dict]:
    """The frontier rows of the candidates behind the lowest gate that any of them meets the
    default's bar behind (none if no gate helps)."""
    fixed = [r for r in records if r.mode in (BASELINE, REFERENCE)]
    modes = [m for m in dict.fromkeys(r.mode for r in records) if _is_candidate(m)]
    for length, tokens in sorted(gates(records).items()):
        rows = []
        for mode in modes:
            mine = [*fixed, *gated(records, mode, length, tokens)]
            name = gated_name(mode, tokens)
            rows.append(_frontier_row(mine, summarize(mine), name, bar, every_case))
        if any(row["meets_default"] for row in rows):
            return rows
    return []


def choose(records: list[Record], bar: Bar = Bar()) -> Calibration:
    """The frontier of a calibration run, its default and its fast trade; where no candidate
    meets the default's bar, the candidates behind the lowest gate that one of them meets (for
    the default only: the fast trade is for speed, and a gate gives that up)."""
    rows, every_case = summarize(records), counting(records)
    modes = dict.fromkeys(r.mode for r in records)
    frontier = [_frontier_row(records, rows, mode, bar, every_case) for mode in modes]
    fast = _fastest(frontier, "meets_fast")  # a trade for speed: never behind a gate
    if _fastest(frontier, "meets_default") is None:
        frontier += _gated_rows(records, bar, every_case)
    return Calibration(frontier, _fastest(frontier, "meets_default"), fast, records)
