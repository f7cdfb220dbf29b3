"""Time and work of single decode steps after a passkey prefill: lazy decode, full decode, stock.

Shows where lazy decoding spends its time: each step's (token, layer) pairs computed (the new
token's 30 plus revived prompt tokens) next to its wall time, against a stock mlx-lm decode step.

    .venv/bin/python benchmarks/decode_steps.py --prompt-len 1024 --steps 12
"""

from __future__ import annotations

import lazymlx  # first: it binds OpenBLAS, which only works before anything imports MLX

# isort: split
import argparse
import json
import time

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache

from lazymlx import LazyConfig, LazyState, engine
from lazymlx.prompts import passkey_prompt


def timed(fn, *args) -> float:
    start = time.perf_counter()
    mx.eval(fn(*args))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt-len", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    model, tokenizer = lazymlx.load()
    prompt = tokenizer.encode(passkey_prompt(tokenizer, args.prompt_len).text)
    default = LazyConfig.preset("default")
    token = tokenizer.encode(" the")[-1]
    report = {"prompt_tokens": len(prompt)}
    for mode in ("lazy", "full"):
        config = LazyConfig(schedule=default.schedule, decode=mode)
        state = LazyState(model)
        engine.prompt_step(state, prompt, config)
        seconds, pairs = [], []
        for _ in range(args.steps):
            seconds.append(timed(engine.decode_step, state, token, config))
            pairs.append(state.last_step.pairs)
        report[mode] = {"seconds": [round(s, 3) for s in seconds], "pairs": pairs}
    cache = make_prompt_cache(model)
    mx.eval(model(mx.array([prompt]), cache=cache))
    stock = [timed(model, mx.array([[token]]), cache) for _ in range(args.steps)]
    report["stock"] = {"seconds": [round(s, 3) for s in stock]}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
