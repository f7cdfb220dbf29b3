"""What calibrating Qwen2.5-Coder costs with the search (lazymlx/evals/search_plan.py) against the runs
its calibration records hold, replayed without running a model.

Every record is a greedy, deterministic outcome, so the search can be replayed over them: each
run it asks for is looked up in the file instead of run. A run the file does not hold (a
candidate never run on that case) is one the search would have had to make with an outcome
nobody knows; the replay then drops that candidate, as `choose` treats a candidate missing a
case (never chosen), and counts the gap. The reference runs where the file has it (the 1k
cases), so every bar is the one the shipped choice was judged against.

    .venv/bin/python benchmarks/calibration_cost.py \
        > benchmarks/results/models/qwen2.5-coder-0.5b/calibration_cost.json

Result (2026-11-27, calibration.jsonl: 41 cases, 414 records; output in
benchmarks/results/models/qwen2.5-coder-0.5b/calibration_cost.json): the search makes 134
runs (56 stock and reference, 78 candidate runs) where the file holds 414: 32% of the runs and
36% of the prompt tokens (21% of the 632 runs one `calibrate --candidates <the file's ten>`
made before the search), and `choose` over its records picks what it picks over the whole
file: default 0.5@24% 0.3@57% sparse, fast 0.4@24% 0.4@57% sparse. One gap: after
0.4@24% 0.4@57% sparse (dropped at 4k, kept for the fast trade) the search runs its
revive-decoding twin, first on the 4k look-alike the sparse one lost, which the file never ran.
Had it lost there too, the count is as above; had it kept every case, it would have been the
default (as `choose` would have it with those runs); had it lost only its last case, the
search would have made 38 more runs (172, 42% of the file's).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from lazymlx.engine.config import PRESETS
from lazymlx.evals.choice import Bar, candidate_config, case_id, choose
from lazymlx.evals.records import BASELINE, NO_IDLE, Record, read_records
from lazymlx.evals.reference import REFERENCE
from lazymlx.evals.search_plan import Plan, by_work, next_run, run_order, standing

RECORDS = Path("benchmarks/results/models/qwen2.5-coder-0.5b/calibration.jsonl")
LAYERS = 24  # Qwen2.5-Coder-0.5B


def candidates(records: list[Record]) -> list[str]:
    """The candidate modes the file holds (no-idle twins are reports, not candidates)."""
    modes = dict.fromkeys(r.mode for r in records)
    return [m for m in modes if m not in (BASELINE, REFERENCE) and not m.endswith(NO_IDLE)]


def plan_for(records: list[Record]) -> Plan:
    """The search over the file's cases and candidates, the reference where the file has it."""
    cases = run_order(case_id(r) for r in records if r.mode == BASELINE)
    lengths = [length for _, length, _ in cases]
    base = PRESETS["gentle"]  # "default" in the file: the rule it ran then, 0.2@67%
    configs = {name: candidate_config(base, name) for name in candidates(records)}
    shares = {
        name: (lambda n, c=config: c.work_share(n, LAYERS)) for name, config in configs.items()
    }
    referenced = frozenset(case_id(r) for r in records if r.mode == REFERENCE)
    return Plan(cases, by_work(shares, lengths), referenced, Bar())


def replay(records: list[Record]) -> tuple[list[Record], list[tuple], Plan]:
    """The records the search asks for, in its order; the runs the file lacks; the final plan."""
    held = {(case_id(r), r.mode): r for r in records}
    plan, ran, gaps = plan_for(records), [], []
    while (step := next_run(plan, ran)) is not None:
        if step in held:
            ran.append(held[step])
            continue
        gaps.append(step)
        plan = replace(plan, candidates=tuple(c for c in plan.candidates if c != step[1]))
    return ran, gaps, plan


def tokens(records: list[Record]) -> int:
    return sum(r.prompt_tokens for r in records)


def grid(records: list[Record]) -> list[Record]:
    """What one `lazymlx calibrate --candidates <the file's>` ran before the search: stock, the
    reference and every candidate on every case, and a no-idle twin of each candidate on
    every multi-turn case (stock's rows stand in for runs the file lacks: their prompt tokens)."""
    stock = [r for r in records if r.mode == BASELINE]
    multi = [r for r in stock if r.kind != "raw"]
    return stock * (2 + len(candidates(records))) + multi * len(candidates(records))


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # --help only
    _, records = read_records(RECORDS)
    ran, gaps, plan = replay(records)
    full, searched = choose(records), choose(ran)
    report = {
        "records": str(RECORDS),
        "order": list(plan_for(records).candidates),
        "runs_in_file": len(records),
        "runs_searched": len(ran),
        "stock_and_reference_runs": sum(r.mode in (BASELINE, REFERENCE) for r in ran),
        "run_share": round(len(ran) / len(records), 3),
        "runs_in_one_grid_run": len(grid(records)),
        "prompt_tokens_in_file": tokens(records),
        "prompt_tokens_in_one_grid_run": tokens(grid(records)),
        "prompt_tokens_searched": tokens(ran),
        "token_share": round(tokens(ran) / tokens(records), 3),
        "chosen": {"file": full.chosen, "searched": searched.chosen},
        "fast": {"file": full.fast, "searched": searched.fast},
        "same_choice": (full.chosen, full.fast) == (searched.chosen, searched.fast),
        "standing": standing(plan, ran),
        "gaps": [{"case": list(case), "mode": mode} for case, mode in gaps],
    }
    json.dump(report, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
