"""What pruning a short prompt saves and what it costs: the threshold below which prompts run whole.

For everyday chat questions (through the chat template) and for real English text of growing
length (passages of Python's own documentation, `pydoc_data.topics`, as raw completions), each
prompt runs keep-all (`off`) and pruned by the default schedule with no threshold, back to back.
Per range of prompt lengths: how often the first `--tokens` generated tokens are identical, and
the TTFT each mode took.

    .venv/bin/python benchmarks/studies/2026-11-25-late-selection/short_prompts.py --output benchmarks/studies/2026-11-25-late-selection/short_prompts.json
"""

from __future__ import annotations

import lazymlx  # first: it binds OpenBLAS, which only works before anything imports MLX

# isort: split
import argparse
import json
import statistics
from dataclasses import replace
from pydoc_data.topics import topics

from lazymlx import LazyConfig
from lazymlx.engine.config import PRESETS
from lazymlx.evals.timing import header
from lazymlx.prompts import everyday_prompts

PASSAGES = ("for", "with", "lambda", "exceptions", "import", "class")
LENGTHS = (64, 128, 256, 512, 1024)
RANGES = ((0, 64), (64, 128), (128, 256), (256, 512), (512, 1024), (1024, 1 << 20))


def prompts(tokenizer) -> list[tuple[str, list[int]]]:
    """(kind, tokens): chat questions, raw completions, documentation passages cut to length
    (some topics are shorter than the longest lengths)."""
    cases = everyday_prompts(tokenizer)
    for length in LENGTHS:
        for topic in PASSAGES:
            body = tokenizer.encode(topics[topic])[: length - 12]
            ending = tokenizer.encode("\n\nIn one sentence, the text above explains")
            cases.append(("documentation", body + ending))
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    model, tokenizer = lazymlx.load()
    pruned = replace(PRESETS["gentle"], min_prompt=0)
    records = []
    for kind, tokens in prompts(tokenizer):
        runs = {}
        for mode, config in (("off", LazyConfig()), ("pruned", pruned)):
            responses = list(
                lazymlx.stream_generate(model, tokenizer, tokens, args.tokens, lazy=config)
            )
            runs[mode] = ([r.token for r in responses], responses[-1].ttft_s)
        records.append(
            {
                "kind": kind,
                "prompt_tokens": len(tokens),
                "identical": runs["off"][0] == runs["pruned"][0],
                "ttft_off_s": runs["off"][1],
                "ttft_pruned_s": runs["pruned"][1],
            }
        )
        print(json.dumps(records[-1]), flush=True)
    rows = []
    for low, high in RANGES:
        group = [r for r in records if low <= r["prompt_tokens"] < high]
        if not group:
            continue
        rows.append(
            {
                "prompt_tokens": f"{low}-{high - 1}" if high < 1 << 20 else f"{low}+",
                "prompts": len(group),
                "mean_tokens": statistics.mean(r["prompt_tokens"] for r in group),
                "identical": sum(r["identical"] for r in group),
                "ttft_off_s": statistics.mean(r["ttft_off_s"] for r in group),
                "ttft_pruned_s": statistics.mean(r["ttft_pruned_s"] for r in group),
            }
        )
    report = header("smollm2-135m", generated_tokens=args.tokens, schedule=pruned.describe())
    with open(args.output, "w") as file:
        json.dump(report | {"rows": rows, "prompts": records}, file, indent=1)
    print(table(rows, args.tokens))


def table(rows: list[dict], tokens: int) -> str:
    lines = [
        f"| prompt tokens | prompts | first {tokens} tokens identical | TTFT keep-all (s) "
        "| TTFT pruned (s) | saved (s) |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        off, pruned = row["ttft_off_s"], row["ttft_pruned_s"]
        lines.append(
            f"| {row['prompt_tokens']} | {row['prompts']} | {row['identical']}/{row['prompts']} "
            f"| {off:.2f} | {pruned:.2f} | {off - pruned:.2f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
