"""Choosing a default on calibration cases: the fastest candidate that keeps the baseline's answers.

Candidates run on the calibration split (seeds and documents the validation split never uses)
next to the cached baseline and two references (lazymlx/evals/reference.py: stock with its
weights round-tripped through 8 bits, and through 4 bits). The bar, as the field judges:
- exact answers: at every length a default keeps at least min(`per_length`, the 8-bit
  reference's share) of the baseline's right answers, and in every family pooled over lengths
  at least min(`per_family`, the 8-bit reference's share), on the same cases; a model that
  answers on near-ties is not asked to be steadier than stock itself (without the reference,
  the plain shares);
- open answers (summaries, questions, second turns, code lines, docstrings): in every open
  family and at every length, the mean similarity to the gold text where there is one, and
  stock's mean judgment (NLL) of the answers, no worse than the 4-bit reference's on the same
  cases (`OpenCheck`), what users already accept;
- no answer that loops where stock's does not.
Where no candidate meets the bar, each is tried behind a gate (`min_prompt`): the shorter
calibration lengths run whole, so they give stock's answers, and the candidate must meet the
bar with the rest; the lowest gate any candidate meets wins. "Fastest" is ranked by the
compute fraction the engine counts, which is exact and repeatable where wall time on a shared
machine is not; the TTFT speedup is shown beside it. The fastest candidate keeping
`fast_overall` of the answers overall is the `fast` trade; at equal prefill work a
sparse-decode candidate ranks first, since it revives nothing while decoding. Decisions are
pure over the records, so an earlier run can be re-decided without running anything.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from lazymlx.engine.config import FLOOR_TOKENS, PRESETS, LazyConfig
from lazymlx.engine.presets import resolve_preset
from lazymlx.errors import LazymlxError
from lazymlx.evals.records import BASELINE, NO_IDLE, Record
from lazymlx.evals.reference import REFERENCE, REFERENCE_4BIT, REFERENCE_BITS
from lazymlx.evals.scoring import bootstrap_interval
from lazymlx.evals.strategies import Strategy, pruning_base, resolve
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
# tokens every bare schedule tried loops or drifts (benchmarks/studies/2026-11-27-open-answers/).
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
_MASS = re.compile(r"mass(?P<share>\d*\.?\d+)")  # mass0.9: keep what holds 90% of the attention
_LEAST = re.compile(r"least(?P<share>\d*\.?\d+)")  # least0.05: at least 5% on past each prune
_DENSE = re.compile(r"dense(?P<share>\d*\.?\d+)")  # dense0.3: whole where the mass needs > 30%
# point0.5: the first cut where the question points at the text (LazyConfig.point)
_POINT = re.compile(r"point(?P<share>\d*\.?\d+)")
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


def candidate_configs(
    default: LazyConfig, gentle: LazyConfig | None = None
) -> dict[str, LazyConfig]:
    """Every listed candidate's config, built from a model's default (and its own gentle rule,
    as candidate_config takes it); a default that prunes nothing is no candidate (its answers
    are stock's)."""
    names = [name for name in CANDIDATES if default.prunes or name != "default"]
    return {name: candidate_config(default, name, gentle) for name in names}


def candidate_config(
    default: LazyConfig, name: str, gentle: LazyConfig | None = None
) -> LazyConfig:
    """A candidate by name: "default", "keep-all", or a schedule written as the listed ones are ("0.3@24%
    0.2@57%": keep 30% at 24% of depth, then 20% of those at 57%; "min256" after it keeps at
    least 256 tokens at each prune, none the default's floor; " sparse" then decodes without
    revival; " from3840" last runs prompts under 3,840 tokens whole), listed or not, so a model
    whose answers survive harder pruning can be tried on it. A mass rule starts "mass0.9" (keep
    the fewest tokens holding 90% of the attention, the ratios its ceilings) and may set its
    least share and the share past which a prompt runs whole after the steps ("mass0.9 1@24%
    0.5@57% least0.05 dense0.3 min256"); "point0.5" before the floor lets the first cut wait
    for the question to point at the text (LazyConfig.point). A schedule keeps
    the rest of the model's pruning base (strategies.pruning_base): its default where that prunes,
    else `gentle`, the model's own gentle rule (None: the built-in one), as lazymlx/evals/strategies.py builds
    the comparison strategies."""
    if name == "keep-all":  # what a model ships where no candidate holds: every prompt whole
        return PRESETS["keep-all"]
    gate = _GATE.fullmatch(name)
    if gate:
        chosen = candidate_config(default, gate["candidate"], gentle)
        return replace(chosen, min_prompt=int(gate["tokens"]))
    if name == "default":
        return default
    sparse = name.endswith(SPARSE)
    words = name.removesuffix(SPARSE).split()
    mass = _MASS.fullmatch(words[0]) if words else None
    words = words[1:] if mass else words
    floor = _FLOOR.fullmatch(words[-1]) if words else None
    words = words[:-1] if floor else words
    point = _POINT.fullmatch(words[-1]) if words else None
    words = words[:-1] if point else words
    dense = _DENSE.fullmatch(words[-1]) if mass and words else None
    words = words[:-1] if dense else words
    least = _LEAST.fullmatch(words[-1]) if mass and words else None
    words = words[:-1] if least else words
    steps = [_STEP.fullmatch(step) for step in words]
    if not steps or not all(steps):
        raise LazymlxError(
            f"no calibration candidate {name!r}; candidates are: {', '.join(CANDIDATES)}, or a "
            "schedule written like them, e.g. '0.3@24% 0.2@57% min256 sparse from2048' or "
            "'mass0.9 1@24% 0.5@57% least0.05 sparse'"
        )
    pairs = tuple((float(step["depth"]) / 100, float(step["ratio"])) for step in steps)
    return replace(
        pruning_base(default, gentle),
        schedule=pairs,
        mass=float(mass["share"]) if mass else 0.0,
        least=float(least["share"]) if least else 0.0,
        dense=float(dense["share"]) if dense else 1.0,
        point=float(point["share"]) if point else 0.0,
        decode="sparse" if sparse else "revive",
        min_keep=int(floor["tokens"]) if floor else 0,
    )


def preset_or_candidate(name: str, model: str | None) -> LazyConfig:
    """A preset of the model's (resolve_preset), or else a rule in the candidates' grammar built
    from its default and gentle rule as calibrate builds it, so a benchmark or an eval can time
    or replay a rule no preset ships ("mass0.999 0.5@24% 0.3@57% sparse"). A name that is no
    rule (it has no "@") is an unknown preset, and said so."""
    try:
        return resolve(name, model)
    except LazymlxError:
        if "@" not in name:
            raise
        default, gentle = resolve_preset("default", model), resolve_preset("gentle", model)
        return candidate_config(default, name, gentle)


def gentler(config: LazyConfig) -> LazyConfig:
    """Half the pruning of `config`, for the `gentle` trade calibration ships beside the default:
    each keep ratio r becomes (1 + r) / 2, and so does a mass rule's least share, its mass and
    dense share unchanged (the same prompts prune, each keeping more)."""
    schedule = tuple((depth, (1 + r) / 2) for depth, r in config.schedule)
    if config.mass:
        return replace(config, schedule=schedule, least=(1 + config.least) / 2)
    return replace(config, schedule=schedule)


def candidate_strategies(
    default: LazyConfig, only: list[str] | None = None, gentle: LazyConfig | None = None
) -> list[Strategy]:
    """The candidates to run, `only` those named if given, built from the model's default and
    gentle rule (candidate_config). A default that equals a candidate (a calibrated model's)
    runs once, under the candidate's name, sparse or not: each run of a 4k case is minutes of
    CPU here."""
    made = candidate_configs(default, gentle)
    twin = next((n for n, config in made.items() if n != "default" and config == default), None)
    if only is None:  # the schedules, and the default under its twin's name if it has one
        only = [name for name in made if not name.endswith(SPARSE) or name == twin]
    run = {name: candidate_config(default, name, gentle) for name in only}
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
    the search (search_plan.py) does not run it there and `choose` does not ask for it."""
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
    A reference share lowers the bar only for a group whose right answers the reference all ran:
    one run on fewer cases says nothing about the others."""
    reference = {(r["family"], r["length"]): r for r in rows if r["mode"] == REFERENCE}

    def needed(plain: float, group: dict) -> float:
        theirs = reference.get((group["family"], group["length"]))
        if theirs is None or theirs["kept_share"] is None:
            return plain
        if theirs["baseline_right"] < group["baseline_right"]:
            return plain
        return min(plain, theirs["kept_share"])

    mine = [r for r in rows if r["mode"] == mode]
    pooled = [
        r for r in mine if r["family"] == ALL and r["length"] != ALL and r["kept_share"] is not None
    ]
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


@dataclass(frozen=True)
class OpenCheck:
    """One open-ended group (a family pooled over lengths, or a length pooled over the open
    families) on one measure: "gold" (similarity to the gold text, higher is better) or
    "judge" (stock's mean NLL of the answers, lower is better). The bar is the worse of stock's
    and the 4-bit reference's means on the same cases (the weights users run lose that much,
    and a reference that beat stock by chance sets no bar above stock's own); where the 4-bit
    reference did not run, stock's own. `interval`: the paired 90% bootstrap interval of the
    mode's mean minus the 4-bit reference's."""

    group: str
    measure: str
    mine: float
    needed: float
    interval: tuple[float, float] | None

    @property
    def margin(self) -> float:
        """How far the group sits on the right side of its bar (negative: below it)."""
        return self.mine - self.needed if self.measure == "gold" else self.needed - self.mine

    @property
    def name(self) -> str:
        return f"{self.group} ({self.measure})"


OPEN_MEASURES = {"gold": "target_score", "judge": "nll"}
# A prompt the candidate ran whole gives stock's answer, but its likelihood comes through the
# engine's kernels, off by float rounding (1e-8 seen): a margin this small is no loss.
ROUNDING = 1e-6


def open_checks(records: list[Record], mode: str, intervals: bool = True) -> list[OpenCheck]:
    """The open-ended bar's groups for `mode`: each open family and each length, on each
    measure its answers have, paired case by case with stock's and the 4-bit reference's."""
    stock = {case_id(r): r for r in records if r.mode == BASELINE}
    four = {case_id(r): r for r in records if r.mode == REFERENCE_4BIT}
    mine = [r for r in records if r.mode == mode and r.score is not None]
    checks = []
    for measure, field in OPEN_MEASURES.items():
        groups: dict[str, list[tuple[str, float, float, float | None]]] = {}
        for r in mine:
            base, ref = stock.get(case_id(r)), four.get(case_id(r))
            values = [getattr(x, field) if x else None for x in (r, base, ref)]
            if None in values[:2] or (four and values[2] is None):
                continue  # not paired: a case stock (or the reference, where it ran) lacks
            row = (r.family, *values)
            groups.setdefault(r.family, []).append((f"{r.length}", *row[1:]))
            groups.setdefault(f"{r.length} tokens", []).append((r.family, *row[1:]))
        for group, rows in groups.items():
            means = [sum(v[i] for v in rows) / len(rows) for i in (1, 2)]
            ref_mean = sum(v[3] for v in rows) / len(rows) if four else None
            worse = min if measure == "gold" else max
            needed = means[1] if ref_mean is None else worse(means[1], ref_mean)
            interval = None
            if intervals and ref_mean is not None:
                strata: dict[str, list[float]] = {}
                for stratum, value, _, reference in rows:
                    strata.setdefault(stratum, []).append(value - reference)
                interval = bootstrap_interval(list(strata.values()), resamples=2000, level=0.9)
            checks.append(OpenCheck(group, measure, means[0], needed, interval))
    return checks


def new_loops(records: list[Record], mode: str) -> int:
    """The mode's open answers that loop where stock's answer to the same case does not."""
    stock = {case_id(r): r.looped for r in records if r.mode == BASELINE}
    return sum(
        r.looped and not stock.get(case_id(r), False)
        for r in records
        if r.mode == mode and r.score is not None
    )


def margin(check: Check) -> float:
    """How far a group sits above (or below) its bar; a group with no right answer at 0."""
    _, row, needed = check
    return (row["kept_share"] or 0.0) - needed


def _is_candidate(mode: str) -> bool:
    """Whether a mode is a candidate the bar applies to: not stock, not a reference, and a
    multi-turn run after completion (not its no-idle twin)."""
    return mode not in (BASELINE, *REFERENCE_BITS) and not mode.endswith(NO_IDLE)


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
        min(lengths, key=margin, default=None),
        min(families, key=margin, default=None),
    )
    opened = open_checks(records, mode) if mode != BASELINE else []
    worst_open = min(opened, key=lambda check: check.margin, default=None)
    loops = new_loops(records, mode)
    open_ok = not loops and all(check.margin >= -ROUNDING for check in opened)
    return {
        "mode": mode,
        "compute_fraction": overall["compute_fraction"],
        "speedup": overall["speedup"],
        "kept": overall["kept"],
        "baseline_right": overall["baseline_right"],
        "kept_share": overall["kept_share"],
        "worst_length": worst_length[0] if worst_length else None,
        "worst_length_share": worst_length[1]["kept_share"] if worst_length else None,
        "worst_length_bar": worst_length[2] if worst_length else None,
        "worst_family": worst_family[0] if worst_family else None,
        "worst_family_share": worst_family[1]["kept_share"] if worst_family else None,
        "worst_family_bar": worst_family[2] if worst_family else None,
        "worst_open": worst_open.name if worst_open else None,
        "worst_open_value": worst_open.mine if worst_open else None,
        "worst_open_bar": worst_open.needed if worst_open else None,
        "worst_open_interval": worst_open.interval if worst_open else None,
        "new_loops": loops,
        "cases": len(ran),
        "meets_default": covers and open_ok and all(margin(c) >= -1e-9 for c in lengths + families),
        "meets_fast": covers and (overall["kept_share"] or 0) >= bar.fast_overall - 1e-9,
    }


def prunes_here(row: dict) -> bool:
    """Whether a frontier row's candidate pruned on the cases it ran (a gated or floored one
    may run every one of them whole: stock's work, so no speed-up)."""
    return row["compute_fraction"] is not None and row["compute_fraction"] < 1 - 1e-9


def _fastest(frontier: list[dict], key: str) -> str | None:
    """The candidate with the least work among those meeting `key`'s bar (at equal prefill
    work sparse decode is faster, since it revives nothing). The fast trade is a trade for
    speed: a candidate that pruned nothing on these cases is never called fast."""
    passing = [row for row in frontier if _is_candidate(row["mode"]) and row[key]]
    if key == "meets_fast":
        passing = [row for row in passing if prunes_here(row)]
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
    fixed = [r for r in records if r.mode in (BASELINE, *REFERENCE_BITS)]
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
