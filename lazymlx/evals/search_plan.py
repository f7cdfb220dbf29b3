"""Which run a calibration does next: the cheapest one that can still change its answer.

Calibration used to run every candidate on every case. Most of that work decides nothing: a
candidate that has lost more answers at a length than its bar allows will not be chosen
whatever the other cases say, and once the fastest candidate still standing has met the bar on
every case, slower ones cannot be chosen either. So stock and the references run once first
(they fix each group's bar, and whichever candidate is chosen needs them on every case): the
8-bit reference on the cases with exact answers, the 4-bit one on the open ones. Then
candidates run one at a time, the one with the least scheduled work first
(`LazyConfig.work_share`; a mass rule at the least it can keep), each dropped the moment no
outcome of its remaining cases could let it meet the bar. Every decision here is a pure
function of the plan and the records so far, so an interrupted run resumes from its journal
and a recorded one can be replayed (benchmarks/calibration_cost.py); `choose` (choice.py)
still makes the choice.

"Can no longer meet" is judged on the best completion: every exact case the candidate has not
run is kept and, where the 8-bit reference has not run it yet, lost by the reference; every
open case it has not run matches its gold text whole and is judged perfectly likely. With the relative bar a loss is forgiven where
the reference loses too (the bar at a group is min(plain, the reference's share)), so a
candidate stays while its losses in a group could still be matched by the reference's there,
or its share could still reach the plain bar.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from lazymlx.evals.choice import (
    Bar,
    CaseId,
    case_id,
    counting,
    gate_tokens,
    gated,
    gated_name,
    gates,
    new_loops,
    open_checks,
)
from lazymlx.evals.records import BASELINE, Record
from lazymlx.evals.reference import REFERENCE, REFERENCE_4BIT, REFERENCE_BITS

Run = tuple[CaseId, str]  # a case and the mode to run on it
TOLERANCE = 1e-9  # choose's own slack on a share meeting its bar
# --minutes sizes the case set for stock, the reference and this many candidate passes: the
# search drops failing candidates early, and on Qwen2.5-Coder's records it ran about three
# passes' worth (benchmarks/calibration_cost.py)
PLANNED_PASSES = 3


@dataclass(frozen=True)
class Plan:
    """A search: its cases in the order candidates run them, its candidates cheapest first,
    the cases the 8-bit reference runs on (those with exact answers, or none with
    --no-reference), the bar, and the cases the 4-bit reference runs on (the open ones)."""

    cases: tuple[CaseId, ...]
    candidates: tuple[str, ...]
    referenced: frozenset[CaseId]
    bar: Bar = Bar()
    four_bit: frozenset[CaseId] = frozenset()

    def references(self) -> dict[str, frozenset[CaseId]]:
        """Each reference's mode and the cases it runs on."""
        return {REFERENCE: self.referenced, REFERENCE_4BIT: self.four_bit}


def run_order(cases: Iterable[CaseId]) -> tuple[CaseId, ...]:
    """Cases round-robin: the first case of every family at every length (shortest first),
    then every family's second, and so on. A candidate that loses in some group meets it
    early, and the cheap lengths come first within a round."""
    cases, ranked, seen = tuple(cases), [], {}
    families = list(dict.fromkeys(family for family, _, _ in cases))
    for case in cases:
        group = case[:2]
        seen[group] = seen.get(group, -1) + 1
        ranked.append((seen[group], case[1], families.index(case[0]), case))
    return tuple(case for *_, case in sorted(ranked))


def by_work(
    candidates: dict[str, Callable[[int], float]], lengths: Sequence[int]
) -> tuple[str, ...]:
    """Candidate names by their mean scheduled work share over the cases' lengths (each a
    function of the prompt's tokens), least first; at equal work a sparse-decode one first,
    as `choose` ranks them."""

    def key(name: str) -> tuple[float, bool]:
        share = sum(candidates[name](length) for length in lengths) / len(lengths)
        return round(share, 12), not name.endswith(" sparse")

    return tuple(sorted(candidates, key=key))


@dataclass(frozen=True)
class Verdict:
    """Where a candidate stands: whether it could still meet the default's and the fast
    trade's bars, the group it cannot meet (its reason), and whether it ran every case."""

    default: bool
    fast: bool
    reason: str | None
    done: bool


def _by_mode(records: Iterable[Record]) -> dict[str, dict[CaseId, Record]]:
    modes: dict[str, dict[CaseId, Record]] = {}
    for r in records:
        modes.setdefault(r.mode, {})[case_id(r)] = r
    return modes


def judge(plan: Plan, seen: dict[str, dict[CaseId, Record]], mode: str) -> Verdict:
    """The candidate's verdict on the best completion of the cases it has not run; `seen`:
    the records so far by mode and case."""
    stock, theirs, mine = seen.get(BASELINE, {}), seen.get(REFERENCE, {}), seen.get(mode, {})
    right = [c for c in plan.cases if c not in stock or stock[c].baseline_correct]

    def best_kept(case: CaseId) -> int:
        return int(bool(mine[case].correct)) if case in mine else 1

    def reference_kept(case: CaseId) -> int:  # a reference not run yet may still lose it
        return int(bool(theirs[case].correct)) if case in theirs else 0

    def meets(group: list[CaseId], plain: float) -> bool:
        if not group:
            return True
        if sum(map(best_kept, group)) / len(group) >= plain - TOLERANCE:
            return True
        if not set(group) <= plan.referenced:  # no reference to lower the bar here
            return False
        return sum(best_kept(c) - reference_kept(c) for c in group) >= 0

    groups = [
        (f"{length} tokens", [c for c in right if c[1] == length], plan.bar.per_length)
        for length in dict.fromkeys(c[1] for c in plan.cases)
    ] + [
        (family, [c for c in right if c[0] == family], plan.bar.per_family)
        for family in dict.fromkeys(c[0] for c in plan.cases)
    ]
    reason = next((name for name, group, plain in groups if not meets(group, plain)), None)
    reason = reason or _open_reason(plan, seen, mode)
    overall = sum(map(best_kept, right)) / len(right) if right else 0.0
    todo = counting(stock.values()) | {c for c in plan.cases if c not in stock}
    return Verdict(
        default=reason is None,
        fast=overall >= plan.bar.fast_overall - TOLERANCE,
        reason=reason,
        done=not (todo - set(mine)),
    )


def _open_reason(plan: Plan, seen: dict[str, dict[CaseId, Record]], mode: str) -> str | None:
    """The open-ended group (calibrate.open_checks) the candidate can no longer bring to its
    bar, or an answer that loops where stock's does not, if any. On a case it has not run its
    best is a perfect gold score and a judgment of 0 (another answer may match the gold text
    better than stock's, and be more likely under stock than stock's own greedy one: one
    that copies the prompt is)."""
    stock = seen.get(BASELINE, {})
    open_cases = [c for c in plan.cases if c in stock and stock[c].score is not None]
    if not open_cases:
        return None
    mine = seen.get(mode, {})

    def unrun(case: CaseId) -> Record:
        gold = None if stock[case].target_score is None else 1.0
        judged = None if stock[case].nll is None else 0.0
        return replace(stock[case], mode=mode, target_score=gold, nll=judged, looped=False)

    best = [mine[c] if c in mine else unrun(c) for c in open_cases]
    fixed = [r for m in (BASELINE, REFERENCE_4BIT) for r in seen.get(m, {}).values()]
    if new_loops([*fixed, *best], mode):
        return "an answer that loops where stock's does not"
    failing = [
        c for c in open_checks([*fixed, *best], mode, intervals=False) if c.margin < -TOLERANCE
    ]
    return f"{failing[0].name}, open-ended" if failing else None


def next_run(plan: Plan, records: Sequence[Record]) -> Run | None:
    """The run that comes next, or None when the answer is known: stock, then the reference,
    on every case; then the cheapest candidate still wanted, on its next case. A candidate is
    wanted while it could meet the default's bar and no cheaper one has met it, or the fast
    trade's and no cheaper one has met that. If every candidate fails the default's bar, the
    candidates go on behind gates (`_next_gated`)."""
    ran = _by_mode(records)
    stock = ran.get(BASELINE, {})
    for case in plan.cases:
        if case not in stock:
            return case, BASELINE
    for mode, cases in plan.references().items():
        for case in plan.cases:
            if case in cases and case not in ran.get(mode, {}):
                return case, mode
    todo, hard = counting(stock.values()), lost(records)
    default_met = fast_met = False
    for mode in plan.candidates:
        verdict = judge(plan, ran, mode)
        wanted = (verdict.default and not default_met) or (verdict.fast and not fast_met)
        if verdict.done:
            default_met |= verdict.default
            fast_met |= verdict.fast
        elif wanted:
            left = [c for c in plan.cases if c in todo and c not in ran.get(mode, {})]
            return min(left, key=lambda c: c not in hard), mode
    return None if default_met else _next_gated(plan, records, ran)[0]


def _next_gated(
    plan: Plan, records: Sequence[Record], ran: dict[str, dict[CaseId, Record]]
) -> tuple[Run | None, str | None]:
    """With no candidate meeting the default's bar, each behind a gate (calibrate.gated: the
    shorter lengths run whole), the lowest gate first and the cheapest candidate first within
    it, as `choose` ranks them: the next case the candidate has not run from the gate's length
    up, or None and the gated candidate that met the bar (None, None: none can)."""
    todo, hard = counting(ran.get(BASELINE, {}).values()), lost(records)
    for length, tokens in sorted(gates(records).items()):
        for mode in plan.candidates:
            name = gated_name(mode, tokens)
            seen = ran | {name: {case_id(r): r for r in gated(records, mode, length, tokens)}}
            verdict = judge(plan, seen, name)
            if verdict.default and verdict.done:
                return None, name
            if verdict.default:
                mine = ran.get(mode, {})
                left = [c for c in plan.cases if c in todo and c[1] >= length and c not in mine]
                return (min(left, key=lambda c: c not in hard), mode), None
    return None, None


def lost(records: Iterable[Record]) -> set[CaseId]:
    """The cases some candidate has lost: a schedule that sank one cheaper candidate is the
    likeliest to sink the next, so each candidate runs them first and, if it is to be
    dropped, is dropped after the fewest runs."""
    return {
        case_id(r)
        for r in records
        if r.mode not in (BASELINE, *REFERENCE_BITS) and r.baseline_correct and not r.correct
    }


def standing(plan: Plan, records: Sequence[Record]) -> dict[str, str]:
    """Each candidate's place in the search, for the report: met, dropped (and why) or not
    needed (a cheaper one met the bar first); and, where none met it, the gated candidate
    that did, if any."""
    out, default_met, seen = {}, False, _by_mode(records)
    for mode in plan.candidates:
        verdict = judge(plan, seen, mode)
        cases = sum(r.mode == mode for r in records)
        if verdict.done and verdict.default:
            out[mode] = f"met the default's bar on {cases} cases"
            default_met = True
        elif not verdict.default:
            trade = ", kept for the fast trade" if verdict.fast else ""
            out[mode] = f"dropped after {cases} cases: below its bar in {verdict.reason}{trade}"
        elif default_met:
            out[mode] = "not needed: a cheaper candidate met the bar"
        else:
            out[mode] = f"unfinished after {cases} cases"
    if not default_met:
        step, met = _next_gated(plan, records, seen)
        if met is not None:
            tokens = gate_tokens(met)
            out[met] = f"met the default's bar with prompts under {tokens} tokens run whole"
        elif step is None:
            out["behind a gate"] = "no candidate met the default's bar at the longer lengths"
    return out


@dataclass(frozen=True)
class Speed:
    """The model's pace on this machine, from one stock run: seconds per prompt token and per
    generated token."""

    prompt_s: float
    decode_s: float

    def run_s(self, tokens: int, max_tokens: int, share: float = 1.0) -> float:
        """A run's expected seconds: its prompt step at `share` of stock's work, then decoding."""
        return tokens * self.prompt_s * share + max_tokens * self.decode_s


def planned_runs(
    case: CaseId,
    candidates: Sequence[str],
    references: Sequence[str],
    cached: Callable[[Run], bool],
    counts: Callable[[CaseId], bool],
) -> list[Run]:
    """The runs a case is expected to cost the search, for sizing it to a time budget: stock
    and the `references` run on it where their answers are not cached already (a registry
    model ships stock's and the 8-bit one's), and PLANNED_PASSES of the cheapest `candidates`
    unless the case counts nowhere (`counts`: stock's cached answer wrong and not open-ended;
    a case whose stock answer is not known yet counts), where candidates never run."""
    modes = [BASELINE, *references]
    runs = [(case, mode) for mode in modes if not cached((case, mode))]
    if counts(case):
        runs += [(case, mode) for mode in candidates[:PLANNED_PASSES]]
    return runs


def fit(
    cases: Sequence[CaseId],
    case_s: Callable[[CaseId], float],
    budget_s: float,
) -> tuple[CaseId, ...]:
    """The cases, in their order, that fit `budget_s` seconds at `case_s` each (a case's whole
    cost in the search); one that does not fit is skipped and cheaper later ones still tried.
    The first always stays: a choice rests on at least one case."""
    chosen, spent = [], 0.0
    for case in cases:
        cost = case_s(case)
        if not chosen or spent + cost <= budget_s:
            chosen.append(case)
            spent += cost
    return tuple(chosen)


def run_search(
    plan: Plan,
    run: Callable[[Run], Record],
    records: Sequence[Record] = (),
    stop: Callable[[Run], bool] = lambda step: False,
) -> list[Record]:
    """The search to its end: `records` (a resumed journal's) kept, then each run `next_run`
    asks for made by `run` until the answer is known or `stop` says the next one does not fit
    (a time budget)."""
    done = list(records)
    while (step := next_run(plan, done)) is not None and not stop(step):
        done.append(run(step))
    return done


def calibration_minutes(
    speed: Speed,
    counts: dict[int, int],
    families: Sequence[str],
    shares: Sequence[Callable[[int], float]],
    answer_tokens: Callable[[str], int],
) -> float:
    """About how long a calibration search takes at `speed`: stock and the reference on every
    case (`counts[length]` cases of each family) and PLANNED_PASSES candidate passes at the
    cheapest candidates' scheduled work (`shares`, cheapest first)."""
    seconds = 0.0
    for length, cases in counts.items():
        for family in families:
            answer = answer_tokens(family)
            runs = 2 * speed.run_s(length, answer) + sum(
                speed.run_s(length, answer, share(length)) for share in shares[:PLANNED_PASSES]
            )
            seconds += cases * runs
    return seconds / 60
