"""Does the pruned model know when it is about to part from stock? Its own lead at each step.

A decode step whose likeliest token leads the runner-up by little is one a thinned context can
tip: pruning moves the logits a little, and a small lead is what a little can overturn. If the
steps where the preset parts from stock's greedy answer are such steps, and other steps seldom
are, a gate on the lead (revive the pruned context when in doubt) would keep stock's path at the
cost of firing only where it matters. This measures that, with no engine change: for each raw
calibration case, the preset's greedy answer with each step's lead (likeliest over runner-up, in
log-probability), stock's answer from the baseline cache, the step where they part, and the rank
of stock's token among the preset's there. Calibration cases only: this chooses a knob.
The published runs' files (results/studies/) are at commit 2b0e219.

    .venv/bin/python benchmarks/studies/2026-11-23-round3/doubt.py --lengths 1k --output benchmarks/results/studies/doubt_1k.json \\
        --families twohop:36,freeform-text:24,lookalike:12,json:12,table:12,passkey,needle-docs,needle-man,needle-pkgdoc,vartrack,code
    .venv/bin/python benchmarks/studies/2026-11-23-round3/doubt.py --summary benchmarks/results/studies/doubt_1k.json \\
        benchmarks/results/studies/doubt_2k.json
"""

from __future__ import annotations

import lazymlx  # first: it binds OpenBLAS, which only works before anything imports MLX

# isort: split
import argparse
import json

import mlx.core as mx

from lazymlx.engine.presets import resolve_preset
from lazymlx.evals.baselines import BaselineCache
from lazymlx.evals.cases import make_cases, parse_families, suite_counts
from lazymlx.evals.runner import baseline_outcome
from lazymlx.evals.scoring import common_prefix
from lazymlx.evals.timing import header
from lazymlx.generation import encode_prompt, stream_generate
from lazymlx.lengths import parse_lengths

THRESHOLDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0)


def preset_steps(model, tokenizer, case, config) -> list[dict]:
    """The preset's greedy answer, step by step: its token, its lead, and its top two."""
    prompt = encode_prompt(tokenizer, case.segments[0])
    steps = []
    for response in stream_generate(model, tokenizer, prompt, case.max_tokens, lazy=config):
        order = mx.argsort(-response.logprobs).tolist()
        logprobs = response.logprobs.tolist()
        steps.append({"token": response.token, "lead": logprobs[order[0]] - logprobs[order[1]],
                      "order": order[:64], "text": response.text})  # fmt: skip
    return steps


def parting(steps: list[dict], stock: list[int]) -> tuple[int | None, int | None]:
    """The first step whose token differs from stock's (None: none does), and the rank of
    stock's token among the preset's there (None past the 64 likeliest or past either's end)."""
    tokens = [step["token"] for step in steps]
    if tokens == stock:
        return None, None
    index = common_prefix(tokens, stock)
    if index == len(tokens) or index == len(stock) or stock[index] not in steps[index]["order"]:
        return index, None
    return index, steps[index]["order"].index(stock[index])


def fires(case: dict, threshold: float, upto: int | None = None) -> bool:
    """Whether a lead under the threshold comes at any step, or at step `upto` or before."""
    leads = case["leads"] if upto is None else case["leads"][: upto + 1]
    return any(lead < threshold for lead in leads)


def summarise(cases: list[dict]) -> None:
    """The gate's worth at each threshold: which parting calls it would catch (a lead under the
    threshold at or before the parting step), and how often it fires (at the first step, where
    it costs TTFT, and anywhere)."""
    parted = [c for c in cases if c["parts_at"] is not None]
    lost = [c for c in cases if c["stock_right"] and not c["kept"]]
    whole = [c for c in cases if c["parts_at"] is None]
    print(f"{len(cases)} calls; {len(parted)} part from stock; {len(lost)} lose a right answer")
    print("leads at the parting step:", sorted(round(c["leads"][c["parts_at"]], 3)
          for c in parted if c["parts_at"] < len(c["leads"])))  # fmt: skip
    print(
        "where stock's token ranks there (0: the likeliest, 1: the runner-up):",
        sorted(str(c["stock_rank"]) for c in parted),
    )
    print("| threshold | parting calls caught | lost answers caught | fires at step 1 | "
          "fires anywhere | fires in calls that never part |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for threshold in THRESHOLDS:
        caught = sum(fires(c, threshold, c["parts_at"]) for c in parted)
        caught_lost = sum(
            fires(c, threshold, c["parts_at"]) for c in lost if c["parts_at"] is not None
        )
        first = sum(c["leads"][0] < threshold for c in cases if c["leads"])
        anywhere = sum(fires(c, threshold) for c in cases)
        needless = sum(fires(c, threshold) for c in whole)
        print(f"| {threshold} | {caught}/{len(parted)} | {caught_lost}/{len(lost)} | "
              f"{first}/{len(cases)} | {anywhere}/{len(cases)} | {needless}/{len(whole)} |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument(
        "--families",
        default="twohop:36",
        help="FAMILY[:CASES],... (CASES a length; else the suite's)",
    )
    parser.add_argument("--lengths", default="1k")
    parser.add_argument("--lazy", default="default")
    parser.add_argument("--output")
    parser.add_argument(
        "--summary", nargs="+", help="print the table of earlier runs' outputs, pooled; run nothing"
    )
    args = parser.parse_args()
    if args.summary:
        pooled = []
        for path in args.summary:
            with open(path) as f:
                pooled += json.load(f)["cases"]
        summarise(pooled)
        return
    if not args.output:
        parser.error("--output is required unless --summary is given")
    config = resolve_preset(args.lazy, args.model)
    model, tokenizer = lazymlx.load(args.model)
    baselines = BaselineCache(model)
    results = []
    cases, lengths = [], parse_lengths(args.lengths)
    for spec in args.families.split(","):
        family, _, count = spec.partition(":")
        counts = suite_counts("calibration", lengths, int(count) if count else None)
        cases += make_cases(tokenizer, parse_families(family), "calibration", counts)
    for case in cases:
        if case.kind != "raw":
            continue
        stock, _ = baseline_outcome(model, tokenizer, case, baselines, None)
        steps = preset_steps(model, tokenizer, case, config)
        parts_at, rank = parting(steps, stock.tokens)
        text = "".join(step["text"] for step in steps)
        scored = case.gold is not None
        results.append(
            {"family": case.family, "length": case.length, "seed": case.seed,
             "stock": stock.text, "preset": text, "parts_at": parts_at, "stock_rank": rank,
             "leads": [round(step["lead"], 4) for step in steps],
             "stock_right": scored and case.correct(stock.text),
             "kept": scored and case.correct(text)}
        )  # fmt: skip
        lead = None if parts_at is None or parts_at >= len(steps) else steps[parts_at]["lead"]
        print(f"{case.family} {case.length} #{case.seed}: parts at {parts_at} (lead {lead}, "
              f"stock's token ranked {rank}); closest lead {min(results[-1]['leads']):.3f}",
              flush=True)  # fmt: skip
        with open(args.output, "w") as f:
            json.dump({"header": header(args.model, lazy=args.lazy), "cases": results}, f, indent=1)
    summarise(results)


if __name__ == "__main__":
    main()
