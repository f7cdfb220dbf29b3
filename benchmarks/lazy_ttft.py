"""TTFT of stock mlx-lm, the engine with `off`, and LazyLLM presets, side by side on one model.

For each length, five passkey prompts (grass/sky filler, key at depths 0.1-0.9, raw completion)
run through every mode back to back, so drift on a shared machine hits all modes alike. A mode's
answer "matches" when its generated text equals the stock run's for the same prompt.

    .venv/bin/python benchmarks/lazy_ttft.py --lengths 1024,2048 --output results/lazy_ttft.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import lazymlx
from lazymlx import LazyConfig
from lazymlx.platform import blas_name, device_name
from lazymlx.prompts import passkey_prompts

MODES: dict[str, LazyConfig | None] = {
    "stock mlx-lm": None,
    "off": LazyConfig.preset("off"),
    "default": LazyConfig.preset("default"),
    "default (full decode)": LazyConfig(
        schedule=LazyConfig.preset("default").schedule, decode="full"
    ),
}


def run(model, tokenizer, text: str, gen_len: int, lazy: LazyConfig | None) -> dict:
    """One generation's timings, engine counts, text and tokens."""
    pieces, tokens, last = [], [], None
    for last in lazymlx.stream_generate(model, tokenizer, text, max_tokens=gen_len, lazy=lazy):
        pieces.append(last.text)
        tokens.append(last.token)
    return {
        "prompt_tokens": last.prompt_tokens,
        "ttft_s": last.ttft_s,
        "generation_tps": last.generation_tps,
        "peak_memory_gb": last.peak_memory,
        "prefill_fraction": last.lazy.prefill_fraction if last.lazy else 1.0,
        "cumulative_fraction": last.lazy.cumulative_fraction if last.lazy else 1.0,
        "max_pair_count": last.lazy.max_pair_count if last.lazy else 1,
        "text": "".join(pieces),
        "tokens": tokens,
    }


def summarize(runs: list[dict]) -> list[dict]:
    rows = []
    keys = sorted(
        {(r["length"], r["mode"]) for r in runs}, key=lambda k: (k[0], list(MODES).index(k[1]))
    )
    for length, mode in keys:
        mine = [r for r in runs if r["length"] == length and r["mode"] == mode]
        rows.append(
            {
                "length": length,
                "mode": mode,
                "prompt_tokens": round(statistics.mean(r["prompt_tokens"] for r in mine)),
                "ttft_s": statistics.mean(r["ttft_s"] for r in mine),
                "speedup": statistics.mean(r["speedup"] for r in mine),
                "prefill_fraction": statistics.mean(r["prefill_fraction"] for r in mine),
                "cumulative_fraction": statistics.mean(r["cumulative_fraction"] for r in mine),
                "generation_tps": statistics.mean(r["generation_tps"] for r in mine),
                "peak_memory_gb": max(r["peak_memory_gb"] for r in mine),
                "correct": sum(r["correct"] for r in mine),
                "matches_baseline": sum(r["matches_baseline"] for r in mine),
                "prompts": len(mine),
            }
        )
    return rows


def markdown(rows: list[dict]) -> str:
    lines = [
        "| prompt tokens | mode | TTFT (s) | speedup vs stock | prefill computed | computed by end "
        "| decode tok/s | peak GB | passkey right | answer = stock's |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['prompt_tokens']} | {r['mode']} | {r['ttft_s']:.2f} | {r['speedup']:.2f}x "
            f"| {r['prefill_fraction']:.0%} | {r['cumulative_fraction']:.0%} "
            f"| {r['generation_tps']:.1f} | {r['peak_memory_gb']:.2f} "
            f"| {r['correct']}/{r['prompts']} | {r['matches_baseline']}/{r['prompts']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="1024,2048")
    parser.add_argument("--gen-len", type=int, default=16)
    parser.add_argument(
        "--modes", default=",".join(MODES), help="comma-separated; the first is the reference"
    )
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    modes = {name: MODES[name] for name in args.modes.split(",")}
    model, tokenizer = lazymlx.load()
    runs = []
    for length in map(int, args.lengths.split(",")):
        for prompt in passkey_prompts(tokenizer, length):
            stock = None
            for mode, config in modes.items():
                result = run(model, tokenizer, prompt.text, args.gen_len, config)
                stock = stock or result
                result |= {
                    "length": length,
                    "depth": prompt.depth,
                    "mode": mode,
                    "speedup": stock["ttft_s"] / result["ttft_s"],
                    "correct": prompt.correct(result["text"]),
                    "matches_baseline": result["text"] == stock["text"],
                }
                runs.append(result)
                print(json.dumps(result), flush=True)
    rows = summarize(runs)
    header = {
        "device": device_name(),
        "blas": blas_name(),
        "mlx": __import__("mlx.core").core.__version__,
        "mlx_lm": __import__("mlx_lm").__version__,
        "lazymlx": lazymlx.__version__,
        "default_preset": LazyConfig.preset("default").describe(),
        "gen_len": args.gen_len,
    }
    print(markdown(rows))
    if args.output:
        args.output.write_text(json.dumps(header | {"rows": rows, "runs": runs}, indent=1) + "\n")


if __name__ == "__main__":
    main()
