"""Where the asked answer ranks at each pruning layer as prompts grow: a ratio or a budget?

A schedule keeps a fixed share of the tokens at each pruning layer, so the work saved is the
same share at every length. A budget that grows slower than the prompt (the share kept
shrinking with length) would save more on long prompts, and is safe only if the answer's rank
among the tokens ranked stays about the same number of tokens as the prompt grows, rather
than the same share. SmolLM2 said "the same share" (studies/STUDIES.md, "A first prune that
grows with the prompt"); this asks a model again (issue 39, item 4).

For each one-prompt case of the calibration split, the prompt step runs with the preset, and at
each pruning layer this records the rank, among the tokens ranked there, of the planted answer's
tokens (the worst of them: the share a layer must keep for all of them to go on, pooling and
all), as tokens and as a share; "dropped" where an earlier layer let one go. Prefill only.
That bounds what a layer must keep, not what is enough: on Qwen2.5-Coder a token cap lost 4k
look-alikes whose answers it kept (benchmarks/README.md, "Where the answer ranks as prompts
grow").

    .venv/bin/python benchmarks/studies/2026-11-27-answer-rank-budget/answer_rank.py --model qwen2.5-coder-0.5b --lengths 1k,2k,4k,8k \\
        --cases 2,2,2,1 --output benchmarks/studies/2026-11-27-answer-rank-budget/answer_rank.json
    .venv/bin/python benchmarks/studies/2026-11-27-answer-rank-budget/answer_rank.py \\
        --summary benchmarks/studies/2026-11-27-answer-rank-budget/answer_rank.json
"""

from __future__ import annotations

import lazymlx  # first: it binds OpenBLAS, which only works before anything imports MLX

# isort: split
import argparse
import json
import statistics
from pathlib import Path

import mlx.core as mx
import numpy as np

from lazymlx.engine import prefill
from lazymlx.engine.presets import resolve_preset
from lazymlx.evals.cases import make_case
from lazymlx.evals.timing import header
from lazymlx.generation import encode_prompt
from lazymlx.lengths import parse_lengths

FAMILIES = "passkey,lookalike,needle-docs,needle-man,code,json"


class Scores:
    """The pooled scores each pruning layer ranked the step's own tokens by, in layer order."""

    def __init__(self) -> None:
        self.by_layer: dict[int, np.ndarray] = {}
        self.own = prefill.Ranker.own

    def __enter__(self) -> Scores:
        def own(ranker, layer, rows, count):
            scores = self.own(ranker, layer, rows, count)
            self.by_layer[layer] = np.array(scores.astype(mx.float32))
            return scores

        prefill.Ranker.own = own
        return self

    def __exit__(self, *_) -> None:
        prefill.Ranker.own = self.own


def answer_tokens(tokenizer, tokens: list[int], answer: str) -> list[int]:
    """Indices of the tokens that spell the answer's one occurrence in the prompt."""
    pieces = [tokenizer.decode([t]) for t in tokens]
    ends = np.cumsum([len(p) for p in pieces])
    text = "".join(pieces)
    start = text.index(answer)
    first = int(np.searchsorted(ends, start, side="right"))
    last = int(np.searchsorted(ends, start + len(answer) - 1, side="right"))
    return list(range(first, last + 1))


def ranks(model, tokenizer, case, config) -> list[dict]:
    """Per pruning layer: the worst rank of the answer's tokens among those ranked there."""
    tokens = encode_prompt(tokenizer, case.segments[0]).tolist()
    wanted = answer_tokens(tokenizer, tokens, case.gold)
    state = lazymlx.LazyState(model)
    state.record = []
    with Scores() as scores:
        prefill.prompt_step(state, mx.array(tokens), config)
    positions = dict(state.record)
    out = []
    for layer, pooled in sorted(scores.by_layer.items()):
        present = positions[layer]
        index = {p: i for i, p in enumerate(present)}
        if any(p not in index for p in wanted):
            out.append({"layer": layer, "ranked": len(present), "rank": None, "share": None})
            continue
        worst = max(int((pooled > pooled[index[p]]).sum()) + 1 for p in wanted)
        out.append(
            {"layer": layer, "ranked": len(present), "rank": worst, "share": worst / len(present)}
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--lazy", default="default", help="the preset whose layers rank")
    parser.add_argument("--lengths", default="1k,2k,4k,8k")
    parser.add_argument("--families", default=FAMILIES)
    parser.add_argument("--cases", default="2", help="cases a family at each length, or 2,2,2,1")
    parser.add_argument("--output", help="the JSON written as cases finish")
    parser.add_argument("--summary", help="print the table of an earlier --output file, and stop")
    args = parser.parse_args()
    if args.summary:
        summary(json.loads(Path(args.summary).read_text())["rows"])
        return
    if not args.output:
        parser.error("--output FILE is needed for a run (or --summary FILE)")
    model, tokenizer = lazymlx.load(args.model)
    config = resolve_preset(args.lazy, args.model)
    lengths = parse_lengths(args.lengths)
    counts = [int(c) for c in args.cases.split(",")]
    counts = counts * len(lengths) if len(counts) == 1 else counts
    head = header(args.model, preset=args.lazy, config=config.describe())
    rows = []
    for length, count in zip(lengths, counts, strict=True):
        for family in args.families.split(","):
            for seed in range(count):
                case = make_case(family, tokenizer, length, seed, "calibration")
                for layer in ranks(model, tokenizer, case, config):
                    rows.append({"length": length, "family": family, "seed": seed} | layer)
                    print(rows[-1], flush=True)
                Path(args.output).write_text(json.dumps(head | {"rows": rows}, indent=1) + "\n")
    summary(rows)


def summary(rows: list[dict]) -> None:
    """Per length and layer: the worst and median rank, as tokens and as a share, and drops."""
    print(
        "| length | layer | tokens ranked (median) | worst rank | median rank | worst share "
        "| median share | dropped before |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for key in sorted({(r["length"], r["layer"]) for r in rows}):
        here = [r for r in rows if (r["length"], r["layer"]) == key]
        seen = [r for r in here if r["rank"] is not None]
        if not seen:
            continue
        cells = [
            round(statistics.median(r["ranked"] for r in seen)),
            max(r["rank"] for r in seen),
            round(statistics.median(r["rank"] for r in seen)),
            f"{max(r['share'] for r in seen):.1%}",
            f"{statistics.median(r['share'] for r in seen):.1%}",
            f"{len(here) - len(seen)} of {len(here)}",
        ]
        print(f"| {key[0]} | {key[1]} | " + " | ".join(str(c) for c in cells) + " |")


if __name__ == "__main__":
    main()
