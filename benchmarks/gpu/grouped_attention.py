"""The engine's written-out masked attention (lazymlx/engine/blocks.py) against the form it replaced.

On MLX's CUDA backend the engine's masked attention is written out (cuDNN's fused kernel builds a
plan per shape). Its first form broadcast keys and values over each group of query heads that
share them; the engine now stacks those heads as rows of one product instead. This times both on
the shapes of an 8B Llama's decode step (1 query) and reviving step (1 + 16 revived), bf16, 50
calls each after 3 untimed ones, twice in turn, and prints the largest difference between them.

    PYTHONPATH=/tmp/site python3 benchmarks/gpu/grouped_attention.py
"""

from __future__ import annotations

import lazymlx  # noqa: F401  first: it sets MLX's CUDA cache checks before MLX starts

# isort: split
import time

import mlx.core as mx

from lazymlx.engine.blocks import _unfused_attention as stacked


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
    for _ in range(3):
        mx.eval(attention(*args))
    start = time.perf_counter()
    for _ in range(50):
        mx.eval(attention(*args))
    return (time.perf_counter() - start) / 50 * 1e3


def main() -> None:
    for rows in (8192, 32768):
        for count in (1, 17):
            queries = mx.random.normal((1, 32, count, 128)).astype(mx.bfloat16)
            keys, values = (mx.random.normal((1, 8, rows, 128)).astype(mx.bfloat16) for _ in "kv")
            mask = mx.random.uniform(shape=(count, rows)) > 0.3
            args = (queries, keys, values, 0.088, mask)
            mx.eval(*args[:3], mask)
            times = {}
            for name, attention in (("broadcast", broadcast), ("stacked", stacked)) * 2:
                times[name] = milliseconds(attention, *args)  # the second turn's
            diff = mx.abs(broadcast(*args).astype(mx.float32) - stacked(*args).astype(mx.float32))
            print(
                f"kv {rows} queries {count}: broadcast {times['broadcast']:.3f} ms, "
                f"stacked {times['stacked']:.3f} ms, max diff {diff.max().item()}"
            )


if __name__ == "__main__":
    main()
