"""TTFT and tok/s of the baseline on the default model, with and without OpenBLAS, side by side.

Each configuration runs in its own process (OpenBLAS must be bound before MLX loads), alternating
`--repeats` times so drift on a shared machine hits both alike. Prompt: a passkey retrieval prompt
(grass/sky filler, key at mid depth, raw completion) of about --prompt-len tokens.

    .venv/bin/python benchmarks/ttft_blas.py --prompt-len 1024 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CONFIGS = {"OpenBLAS": {}, "reference BLAS": {"LAZYMLX_OPENBLAS": "off"}}


def measure(prompt_len: int, gen_len: int) -> dict:
    import lazymlx
    from lazymlx.platform import blas_name
    from lazymlx.prompts import passkey_prompt

    model, tokenizer = lazymlx.load()
    prompt = passkey_prompt(tokenizer, prompt_len)
    text, last = "", None
    for last in lazymlx.stream_generate(model, tokenizer, prompt.text, max_tokens=gen_len):
        text += last.text
    return {
        "blas": blas_name(),
        "prompt_tokens": last.prompt_tokens,
        "ttft_s": last.ttft_s,
        "prompt_tps": last.prompt_tps,
        "generation_tps": last.generation_tps,
        "generation_tokens": last.generation_tokens,
        "peak_memory_gb": last.peak_memory,
        "answer": text,
        "correct": prompt.correct(text),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt-len", type=int, default=1024)
    parser.add_argument("--gen-len", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.prompt_len, args.gen_len)))
        return
    runs: dict[str, list[dict]] = {name: [] for name in CONFIGS}
    for _ in range(args.repeats):
        for name, env in CONFIGS.items():
            command = [
                sys.executable,
                __file__,
                "--child",
                f"--prompt-len={args.prompt_len}",
                f"--gen-len={args.gen_len}",
            ]
            out = subprocess.run(
                command, env=dict(os.environ, **env), capture_output=True, text=True, check=True
            )
            runs[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(name, runs[name][-1], file=sys.stderr)
    summary = {
        name: {
            key: statistics.mean(r[key] for r in rows)
            for key in ("ttft_s", "prompt_tps", "generation_tps", "peak_memory_gb")
        }
        | {
            "prompt_tokens": rows[0]["prompt_tokens"],
            "blas": rows[0]["blas"],
            "correct": all(r["correct"] for r in rows),
        }
        for name, rows in runs.items()
    }
    fast, slow = summary["OpenBLAS"], summary["reference BLAS"]
    print(
        "| BLAS | prompt tokens | TTFT (s) | prompt tok/s | generation tok/s | peak GB | passkey |"
    )
    print("|---|---|---|---|---|---|---|")
    for row in summary.values():
        print(
            f"| {row['blas']} | {row['prompt_tokens']} | {row['ttft_s']:.1f} | {row['prompt_tps']:.1f} | {row['generation_tps']:.1f} | {row['peak_memory_gb']:.2f} | {'right' if row['correct'] else 'wrong'} |"
        )
    print(f"\nTTFT speedup from OpenBLAS: {slow['ttft_s'] / fast['ttft_s']:.1f}x")
    out = Path(__file__).parent / "results" / f"ttft_blas_{args.prompt_len}.json"
    out.write_text(json.dumps({"args": vars(args), "runs": runs, "summary": summary}, indent=2))


if __name__ == "__main__":
    main()
