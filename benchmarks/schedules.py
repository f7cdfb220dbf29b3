"""Candidate pruning schedules on the default model, side by side with stock mlx-lm.

How the shipped `default` preset was chosen: for each prompt (passkey, 5 depths, each length) the
stock mlx-lm answer is computed once, then every candidate schedule runs the same prompt; a
schedule is scored by how many baseline answers it reproduces (first --gen-len tokens equal) and
by its TTFT relative to the stock run of the same prompt.

    .venv/bin/python benchmarks/schedules.py --lengths 1024,2048 --output results/schedules.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from lazy_ttft import run  # a sibling script (its folder is on sys.path)

import lazymlx
from lazymlx import LazyConfig
from lazymlx.prompts import passkey_prompts

CANDIDATES = {
    "design note: 1/2 at 27/54/80%": LazyConfig(schedule=((0.27, 0.5), (0.54, 0.5), (0.8, 0.5))),
    "0.6/0.5/0.5 at 27/54/80%": LazyConfig(schedule=((0.27, 0.6), (0.54, 0.5), (0.8, 0.5))),
    "0.7/0.5/0.5 at 34/54/80%": LazyConfig(schedule=((0.34, 0.7), (0.54, 0.5), (0.8, 0.5))),
    "1/2 at 34/67%": LazyConfig(schedule=((0.34, 0.5), (0.67, 0.5))),
    "0.4/0.5 at 27/54%, 0.5 at 80%": LazyConfig(schedule=((0.27, 0.4), (0.54, 0.5), (0.8, 0.5))),
    "1/2 at 27/54/80%, 4 sinks": LazyConfig(
        schedule=((0.27, 0.5), (0.54, 0.5), (0.8, 0.5)), keep_first=4
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="1024,2048")
    parser.add_argument("--gen-len", type=int, default=8)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    model, tokenizer = lazymlx.load()
    rows = []
    for length in map(int, args.lengths.split(",")):
        for prompt in passkey_prompts(tokenizer, length):
            base = run(model, tokenizer, prompt.text, args.gen_len, None)
            for name, config in CANDIDATES.items():
                lazy = run(model, tokenizer, prompt.text, args.gen_len, config)
                row = {
                    "schedule": name,
                    "length": length,
                    "depth": prompt.depth,
                    "baseline_correct": prompt.correct(base["text"]),
                    "correct": prompt.correct(lazy["text"]),
                    "matches_baseline": lazy["tokens"] == base["tokens"],
                    "speedup": base["ttft_s"] / lazy["ttft_s"],
                    "prefill_fraction": lazy["prefill_fraction"],
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.output:
        args.output.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
