"""The engine's written-out masked attention (lazymlx/engine/blocks.py) against the form it replaced.

On MLX's CUDA backend the engine's masked attention is written out (cuDNN's fused kernel builds a
plan per shape). Its first form broadcast keys and values over each group of query heads that
share them; the engine now stacks those heads as rows of one product instead. This times both
on an 8B Llama's attention shapes (32 query heads, 8 kv heads, bf16) over 8k and 32k cached
rows, for a step of 1 query, a reviving decode step (1 + 16 revived), and the larger steps of
idle completion and of a prompt step that revives (512 and 2048 queries): 20 calls each after 3
untimed ones, the two forms in turn twice (the second turn counts), and the largest
difference between their outputs.

    PYTHONPATH=/tmp/site python3 benchmarks/studies/2026-11-27-gpu-h100-defaults/grouped_attention.py --output $OUT/attention.json
"""

from __future__ import annotations

import lazymlx  # noqa: F401  first: it sets MLX's CUDA cache checks before MLX starts

# isort: split
import argparse
import json
import time

import mlx.core as mx

from lazymlx.engine.blocks import _unfused_attention as stacked
from lazymlx.evals.timing import header


def broadcast(queries, keys, values, scale, mask):
    """The replaced form: keys and values broadcast over each group of query heads."""
    _, num_heads, count, head_dim = queries.shape
    kv_heads = keys.shape[1]
    grouped = queries.reshape(1, kv_heads, num_heads // kv_heads, count, head_dim)
    logits = (grouped * scale) @ keys[:, :, None].swapaxes(-1, -2)
    logits = mx.where(mask, logits, mx.array(-mx.inf, logits.dtype))
    probs = mx.softmax(logits, axis=-1, precise=True)
    return (probs @ values[:, :, None]).reshape(1, num_heads, count, -1)


def milliseconds(attention, *args) -> float:
    """Mean wall time of one call, evaluated, after untimed calls that build MLX's kernels."""
    for _ in range(3):
        mx.eval(attention(*args))
    start = time.perf_counter()
    for _ in range(20):
        mx.eval(attention(*args))
    return (time.perf_counter() - start) / 20 * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    rows = []
    for cached in (8192, 32768):
        for count in (1, 17, 512, 2048):
            queries = mx.random.normal((1, 32, count, 128)).astype(mx.bfloat16)
            keys = mx.random.normal((1, 8, cached, 128)).astype(mx.bfloat16)
            values = mx.random.normal((1, 8, cached, 128)).astype(mx.bfloat16)
            mask = mx.random.uniform(shape=(count, cached)) > 0.3
            mx.eval(queries, keys, values, mask)
            inputs = (queries, keys, values, 0.088, mask)
            times = {}
            for name, attention in (("broadcast", broadcast), ("stacked", stacked)) * 2:
                times[name] = milliseconds(attention, *inputs)
            diff = mx.abs(
                broadcast(*inputs).astype(mx.float32) - stacked(*inputs).astype(mx.float32)
            )
            row = {"cached": cached, "queries": count, **times, "max_diff": diff.max().item()}
            print(json.dumps(row), flush=True)
            rows.append(row)
            mx.clear_cache()
    with open(args.output, "w") as file:
        json.dump(
            {**header("8B Llama attention shapes, bf16"), "unit": "ms a layer", "rows": rows},
            file,
            indent=1,
        )


if __name__ == "__main__":
    main()
