"""How close stock's right answers are to a tie: stock's first answer token and its runner-up.

A forward pass of the whole model over each case's first prompt as the eval feeds it
(`cases.prompt_tokens`); the log-probabilities of the four likeliest first tokens. A right
answer whose first token leads the next by a few thousandths of a nat can flip under any
small change to the computation (a prune at one depth and not at a neighbouring one), so its
loss says little about a rule.

    .venv/bin/python benchmarks/studies/2026-12-02-pointed-place/margin.py \
        real-pick:validation:1000000 real-pick:calibration:0 real-pick:calibration:1 \
        real-option:calibration:0 --out margins_qwen_2k.jsonl
"""

from __future__ import annotations

import lazymlx  # first: binds OpenBLAS

# isort: split
import argparse
import json
from pathlib import Path

import mlx.core as mx

from lazymlx.evals.cases import make_case, prompt_tokens


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("cases", nargs="+", help="family:split:seed")
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--length", type=int, default=2048)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    model, tokenizer = lazymlx.load(args.model)
    for spec in args.cases:
        family, split, seed = spec.split(":")
        case = make_case(family, tokenizer, args.length, int(seed), split)
        ids = prompt_tokens(tokenizer, case)
        logits = model(mx.array([ids]))[0, -1].astype(mx.float32)
        logprobs = logits - mx.logsumexp(logits)
        top = mx.argsort(-logprobs)[:4].tolist()
        record = {
            "family": family,
            "split": split,
            "seed": int(seed),
            "length": args.length,
            "gold": case.gold,
            "top": [[tokenizer.decode([t]), round(logprobs[t].item(), 4)] for t in top],
        }
        record["margin"] = round(record["top"][0][1] - record["top"][1][1], 4)
        print(json.dumps(record), flush=True)
        with Path(args.out).open("a") as f:
            f.write(json.dumps(record) + "\n")
        mx.clear_cache()


if __name__ == "__main__":
    main()
