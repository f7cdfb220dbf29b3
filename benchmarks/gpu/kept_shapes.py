"""A question over a kept context on a GPU: its TTFT against stock's, with and without idle completion.

The speed half of benchmarks/kept_context.py on random-weight Llama shapes (no weights reach the
GPU machine; the answers are judged on the real models on the CPU). A document of random tokens
is computed on its own and kept; then a question of `--question-len` tokens is asked over it.
Stock mlx-lm asks over its whole KV cache; a preset asks over the pruned context as the
document's step left it ("no idle": its prompt step revives what it needs, on the critical
path), or after idle completion by `fill` (lazymlx/engine/complete.py). Per mode:
the document's TTFT, the completion's idle seconds and its longest unit (how long a request
arriving meanwhile waits at most), the question's TTFT, its decode tok/s over `--gen-len`
tokens and peak memory. One untimed warm-up of every mode at each length, then `--repeats`
rounds of all modes back to back; medians.

    PYTHONPATH=/tmp/site python3 benchmarks/gpu/kept_shapes.py --shapes 8b --lengths 8k,32k \\
        --lazy default,fast,qwen2.5-coder-0.5b:default --output $OUT/kept.json
"""

from __future__ import annotations

import lazymlx  # noqa: F401  first: it sets MLX's CUDA cache checks before MLX starts

# isort: split
import argparse
import json
import time
from dataclasses import replace

import mlx.core as mx
from llama_shapes import build, medians, preset
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import make_prompt_cache

from lazymlx import LazyState
from lazymlx.engine import complete
from lazymlx.engine.model import LazyModel
from lazymlx.evals.timing import header
from lazymlx.lengths import parse_lengths

CHUNK = 2048  # prefill chunk, as llama_shapes.py


def ask(model, cache, config, tokens: mx.array, gen_len: int) -> tuple[float, float]:
    """TTFT and decode tok/s of `gen_len` tokens answering `tokens` over `cache`."""
    wrapped = model if config is None else LazyModel(model, cache, config, tokens.size, CHUNK)
    start = time.perf_counter()
    steps = generate_step(tokens, wrapped, max_tokens=gen_len, prompt_cache=cache)
    next(steps)
    ttft = time.perf_counter() - start
    for _ in steps:
        pass
    return ttft, (gen_len - 1) / max(time.perf_counter() - start - ttft, 1e-9)


def run(model, document: mx.array, question: mx.array, mode: str, config, gen_len: int) -> dict:
    mx.clear_cache()
    mx.reset_peak_memory()
    cache = make_prompt_cache(model) if config is None else LazyState(model)
    document_ttft, _ = ask(model, cache, config, document, 1)
    units = []
    while config is not None and complete.pending(cache, config):
        start = time.perf_counter()
        complete.step(cache, config)
        units.append(time.perf_counter() - start)
    question_ttft, decode_tps = ask(model, cache, config, question, gen_len)
    return {
        "mode": mode,
        "document_ttft_s": document_ttft,
        "idle_s": sum(units),
        "units": len(units),
        "longest_unit_s": max(units, default=0.0),
        "question_ttft_s": question_ttft,
        "decode_tps": decode_tps,
        "peak_gb": mx.get_peak_memory() / 1e9,
    }


def modes(presets: list[str]) -> list[tuple[str, object]]:
    runs: list[tuple[str, object]] = [("stock", None)]
    for name in presets:
        config = preset(name)
        for policy, label in (("off", "no idle"), ("fill", "fill")):
            runs.append((f"{name} {label}", replace(config, complete=policy)))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="8b")
    parser.add_argument("--lengths", default="8k,32k")
    parser.add_argument("--lazy", default="default,fast,qwen2.5-coder-0.5b:default")
    parser.add_argument("--question-len", type=int, default=64)
    parser.add_argument("--gen-len", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    runs = modes(args.lazy.split(","))
    report = header(
        "random-weight Llama shapes, bf16: a question over a kept context",
        question_tokens=args.question_len,
        gen_len=args.gen_len,
        repeats=args.repeats,
        presets={name: config.describe() for name, config in runs if config is not None},
    )
    rows = []
    for shape in args.shapes.split(","):
        model = build(shape)
        for length in parse_lengths(args.lengths):
            document = mx.random.randint(0, 128256, (length,), key=mx.random.key(length))
            question = mx.random.randint(0, 128256, (args.question_len,), key=mx.random.key(1))
            for mode, config in runs:  # warm-up at the timed length
                run(model, document, question, mode, config, 4)
            timed = {mode: [] for mode, _ in runs}
            for _ in range(args.repeats):
                for mode, config in runs:
                    timed[mode].append(run(model, document, question, mode, config, args.gen_len))
            rows += medians(shape, length, timed)
            with open(args.output, "w") as file:
                json.dump(report | {"rows": rows}, file, indent=1)
        del model


if __name__ == "__main__":
    main()
