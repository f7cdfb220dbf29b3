"""Pruning strategies side by side on the eval suite: selection rules and length-aware schedules.

Each strategy runs right after stock mlx-lm on every case (held-out calibration seeds by
default, never the eval suite's), and the table gives, per strategy and length, how many of the
answers the baseline got right it kept, with the prefill compute fraction and TTFT speedup.
Selection rules are compared at one schedule, so at equal compute; schedules are compared with
the winning rule. The JSON keeps every record, for tables.py and plot_tradeoff.py.

    .venv/bin/python benchmarks/strategies.py --study selection --lengths 1k,2k --cases 2 \\
        --output benchmarks/results/selection_1k_2k.json
"""

from __future__ import annotations

# isort: split
import argparse
import json
from dataclasses import asdict, replace

from lazymlx import LazyConfig
from lazymlx.bench import header
from lazymlx.calibrate import schedule_label
from lazymlx.cli.app import load_model
from lazymlx.config import DERIVED
from lazymlx.evals.runner import CALIBRATION_SEED, evaluate, make_cases, records_as_dicts
from lazymlx.evals.tasks import parse_tasks
from lazymlx.lengths import parse_lengths
from lazymlx.measure import Strategy

# The studies compare ratio schedules at 1k-4k, as they were run: the default's rule and decode
# at the schedule it had then (layer 17 keeping a quarter), without its length-aware first
# prune (a budget and floor that bind only past ~5k tokens).
RATIOS = replace(
    LazyConfig.preset("default"), schedule=((0.24, 0.4), (0.57, 0.25)), budgets=(), floors=()
)
PAPER = replace(RATIOS, window=1, pool=0, keep_last=0, heads="mean")


def selection_rules() -> dict[str, LazyConfig]:
    """The paper's rule and each widening of it, all at the default schedule and decode."""
    return {
        "paper (last token, mean)": PAPER,
        "max over heads": replace(PAPER, heads="max"),
        "window 8": replace(PAPER, window=8),
        "window 32": replace(PAPER, window=32),
        "span 8": replace(PAPER, pool=8),
        "window 8 + span 8": replace(PAPER, window=8, pool=8),
        "window 8 + span 8 + recent 16 + sinks 4": replace(
            PAPER, window=8, pool=8, keep_last=16, keep_first=4
        ),
    }


def schedules() -> dict[str, LazyConfig]:
    """Ratio schedules against length-aware ones (token budgets), all with the winning rule."""
    ratios = replace(PAPER, window=8, pool=8)
    return {
        "ratios, window 8 + span 8": ratios,
        "ratios + at most 1536 at 27%": replace(ratios, budgets=((0.27, 1536),)),
        "ratios + at most 1024 at 27%": replace(ratios, budgets=((0.27, 1024),)),
        "late: 0.5@50% 0.5@80%": replace(ratios, schedule=((0.5, 0.5), (0.8, 0.5))),
        "mid: 0.5@40% 0.5@80%": replace(ratios, schedule=((0.4, 0.5), (0.8, 0.5))),
        "mid: 0.7@34% 0.5@54% 0.5@80%": replace(
            ratios, schedule=((0.34, 0.7), (0.54, 0.5), (0.8, 0.5))
        ),
    }


def layer_schedules() -> dict[str, LazyConfig]:
    """Schedules that prune only at the layers where the answer ranks high (answer_rank.py):
    on SmolLM2-135M layer 7 of 30 (depth 0.24) is the one early layer whose ranking holds every
    answer in its top 36%, and layers 17-18 (0.57-0.6) in their top 16% (4% for the needles)."""
    rule = replace(PAPER, window=8, pool=8)
    return {
        "7:50% 17:20%": replace(rule, schedule=((0.24, 0.5), (0.57, 0.2))),
        "7:40% 17:25%": replace(rule, schedule=((0.24, 0.4), (0.57, 0.25))),
        "7:50% 17:40% 20:50%": replace(rule, schedule=((0.24, 0.5), (0.57, 0.4), (0.67, 0.5))),
        "17:10%": replace(rule, schedule=((0.57, 0.1),)),
    }


def spans() -> dict[str, LazyConfig]:
    """The span (pool) at the then shipped schedule (RATIOS): too short a span drops the period
    that ends a number, and the model runs it on by extra digits."""
    return {f"span {pool}": replace(RATIOS, pool=pool) for pool in (8, 12, 16, 24)}


def tradeoff() -> dict[str, LazyConfig]:
    """Every rule at four schedules, for the speed–accuracy plot (plot_tradeoff.py): the default's
    rule, LazyLLM's, and the paper's static and random baselines; the then shipped schedule, a
    harsher one, a gentler one (keep-all to layer 17) and the earlier default (layers 8, 16,
    24)."""
    default = RATIOS
    rules = {
        "default rule": default,
        "paper rule": DERIVED["paper"](default),
        "static": DERIVED["static"](default),
        "random": DERIVED["random"](default),
    }
    schedules = (
        default.schedule,
        ((0.24, 0.25), (0.57, 0.2)),
        ((0.57, 0.1),),
        ((0.27, 0.6), (0.54, 0.5), (0.8, 0.5)),
    )
    return {
        f"{rule} @ {schedule_label(replace(config, schedule=schedule))}": replace(
            config, schedule=schedule
        )
        for rule, config in rules.items()
        for schedule in schedules
    }


STUDIES = {
    "selection": selection_rules,
    "schedule": schedules,
    "layers": layer_schedules,
    "spans": spans,
    "tradeoff": tradeoff,
}


def kept_answers(records: list) -> list[dict]:
    """Per strategy and length: baseline-right cases, how many the strategy kept, its cost."""
    rows: dict[tuple, dict] = {}
    baseline_right = {
        (r.task, r.length, r.seed) for r in records if r.mode == "baseline" and r.correct
    }
    for r in records:
        if r.mode == "baseline":
            continue
        row = rows.setdefault(
            (r.mode, r.length),
            {"mode": r.mode, "length": r.length, "cases": 0, "baseline_right": 0, "kept": 0,
             "wrong_to_right": 0, "compute": [], "speedup": []},
        )  # fmt: skip
        row["cases"] += 1
        right = (r.task, r.length, r.seed) in baseline_right
        row["baseline_right"] += right
        row["kept"] += right and r.correct
        row["wrong_to_right"] += (not right) and r.correct
        row["compute"].append(r.compute_fraction)
        row["speedup"].append(r.speedup)
    for row in rows.values():
        row["compute_fraction"] = sum(row.pop("compute")) / row["cases"]
        row["speedup"] = sum(speedups := row.pop("speedup")) / len(speedups)
    return list(rows.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", choices=STUDIES, default="selection")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--tasks", default="all")
    parser.add_argument("--lengths", default="1k,2k")
    parser.add_argument("--cases", type=int, default=2, help="cases per task and length")
    parser.add_argument("--first-seed", type=int, default=CALIBRATION_SEED)
    parser.add_argument("--only", default="", help="comma-separated strategy names to run")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    model, tokenizer = load_model(args.model)
    configs = STUDIES[args.study]()
    if args.only:
        unknown = [name for name in args.only.split(",") if name not in configs]
        if unknown:
            parser.error(f"unknown strategy {unknown[0]!r}; this study has: {', '.join(configs)}")
        configs = {name: configs[name] for name in args.only.split(",")}
    strategies = [Strategy(name, config) for name, config in configs.items()]
    lengths, tasks = parse_lengths(args.lengths), parse_tasks(args.tasks)
    cases = make_cases(tokenizer, tasks, lengths, args.cases, args.first_seed)
    records = []
    for number, case in enumerate(cases, 1):
        print(f"[{number}/{len(cases)}] {case.task} {case.length} seed {case.seed}", flush=True)
        records += evaluate(model, tokenizer, [case], strategies)
        summary = kept_answers(records)
        with open(args.output, "w") as f:  # after every case, so a long run can be read early
            json.dump(
                {
                    "header": header(args.model, study=args.study, cases=args.cases),
                    "strategies": {name: asdict(config) for name, config in configs.items()},
                    "summary": summary,
                    "records": records_as_dicts(records),
                },
                f,
                indent=1,
            )
    for row in summary:
        print(
            f"{row['mode']:40s} {row['length']:>5} kept {row['kept']}/{row['baseline_right']}"
            f" (+{row['wrong_to_right']}) compute {row['compute_fraction']:.0%}"
            f" speedup {row['speedup']:.2f}x"
        )


if __name__ == "__main__":
    main()
