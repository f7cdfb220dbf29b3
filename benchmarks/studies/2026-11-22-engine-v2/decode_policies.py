"""Decode speed of each decode policy, and of revival budgets, on one prompt, side by side.

Every configuration runs the same passkey prompt through lazymlx's path (the lazy prompt step,
then mlx-lm's generate_step); only the decode steps after the first token are timed, with
revival in every step so its cost per step shows. Rounds alternate the configurations so drift
on a shared machine hits them alike.

    .venv/bin/python benchmarks/studies/2026-11-22-engine-v2/decode_policies.py --prompt-len 1024 --steps 40 --rounds 2 \
        --output benchmarks/results/decode_policies_1024.json
"""

from __future__ import annotations

import lazymlx  # first: it binds OpenBLAS, which only works before anything imports MLX

# isort: split
import argparse
import json
import time
from dataclasses import replace

import mlx.core as mx
from mlx_lm.generate import generate_step

from lazymlx import LazyConfig, LazyState
from lazymlx.engine.config import PRESETS
from lazymlx.engine.model import LazyModel
from lazymlx.evals.timing import header
from lazymlx.prompts import passkey_prompt


def configurations() -> dict[str, LazyConfig]:
    default = PRESETS["gentle"]
    policies = {"sparse": replace(default, decode="sparse")}
    for budget in (0, 1, 4, 16):
        policies[f"revive {budget}"] = replace(default, revive=budget, revive_steps=None)
    return policies


def decode_tps(model, prompt: list[int], config: LazyConfig, steps: int) -> float:
    state = LazyState(model)
    wrapped = LazyModel(model, state, config, len(prompt), 2048)
    tokens = generate_step(mx.array(prompt), wrapped, max_tokens=steps + 1, prompt_cache=state)
    next(tokens)  # the prompt step and the first token
    start = time.perf_counter()
    for _ in tokens:
        pass
    return steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt-len", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    model, tokenizer = lazymlx.load()
    prompt = tokenizer.encode(passkey_prompt(tokenizer, args.prompt_len).text)
    runs: dict[str, list[float]] = {name: [] for name in configurations()}
    for _ in range(args.rounds):
        for name, config in configurations().items():
            runs[name].append(decode_tps(model, prompt, config, args.steps))
            print(f"{name}: {runs[name][-1]:.1f} tok/s", flush=True)
    report = header("smollm2-135m", prompt_tokens=len(prompt), steps=args.steps)
    rows = [{"policy": name, "decode_tps": tps} for name, tps in runs.items()]
    with open(args.output, "w") as file:
        json.dump(report | {"rows": rows}, file, indent=1)


if __name__ == "__main__":
    main()
