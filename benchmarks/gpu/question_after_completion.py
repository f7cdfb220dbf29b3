"""Where a completed lazy context's first question loses time on a GPU (kept_shapes.py's 0.24-0.71x).

Three 64-token questions in a row over one context, each one's TTFT: stock mlx-lm's KV cache, a
lazy context that pruned nothing (preset "off"), one pruned by Qwen2.5-Coder's calibrated default
and completed by fill, and the same with every layer's rows put back in position order. Beside
them, one fused attention call over layer 5's keys (stock's, the completed context's, and a
contiguous copy of them), to tell the attention kernel apart from the rest of the step. Two
rounds; the first compiles kernels. Prints one line per measurement (the results file keeps
the output).

    PYTHONPATH=/tmp/site python3 benchmarks/gpu/question_after_completion.py 8b 32768
"""

from __future__ import annotations

import sys
import time

import mlx.core as mx
import numpy as np
from kept_shapes import ask
from llama_shapes import build, preset
from mlx_lm.models.cache import make_prompt_cache

from lazymlx import LazyState
from lazymlx.engine import complete


def questions(model, label: str, cache, config, asked: list[mx.array]) -> None:
    times = [ask(model, cache, config, question, 2)[0] for question in asked]
    print(label, " ".join(f"{1000 * t:.1f}ms" for t in times), flush=True)


def attention_ms(keys: mx.array, values: mx.array, queries: int = 64) -> float:
    """One fused attention call of `queries` tokens over these keys, averaged over ten."""
    q = mx.random.normal((1, 32, queries, keys.shape[-1])).astype(keys.dtype)
    calls = 12
    for call in range(calls):
        if call == 2:
            start = time.perf_counter()
        mx.eval(mx.fast.scaled_dot_product_attention(q, keys, values, scale=0.1, mask="causal"))
    return (time.perf_counter() - start) / (calls - 2) * 1000


def completed(model, config, document: mx.array) -> LazyState:
    state = LazyState(model)
    ask(model, state, config, document, 1)
    complete.complete(state, config)
    return state


def main() -> None:
    shape, length = sys.argv[1], int(sys.argv[2])
    model = build(shape)
    config, off = preset("qwen2.5-coder-0.5b:default"), preset("off")
    document = mx.random.randint(0, 128256, (length,))
    asked = [mx.random.randint(0, 128256, (64,), key=mx.random.key(i)) for i in range(3)]
    for _ in range(2):
        cache = make_prompt_cache(model)
        ask(model, cache, None, document, 1)
        questions(model, "stock", cache, None, asked)
        layer = cache[5]
        keys, values = layer.keys[..., : layer.offset, :], layer.values[..., : layer.offset, :]
        print("stock layer5", keys.dtype, keys.shape, f"sdpa {attention_ms(keys, values):.2f}ms")
        state = LazyState(model)
        ask(model, state, off, document, 1)
        questions(model, "lazy-off", state, off, asked)
        state = completed(model, config, document)
        keys, values = state[5].fetch()
        print(
            "fill layer5",
            keys.dtype,
            keys.shape,
            state[5].keys.shape,
            f"sdpa {attention_ms(keys, values):.2f}ms",
            f"contig {attention_ms(mx.contiguous(keys), mx.contiguous(values)):.2f}ms",
        )
        questions(model, "fill", state, config, asked)
        state = completed(model, config, document)
        for cache in state.layers:
            cache.keep_rows(np.argsort(np.array(cache.row_positions())))
        mx.eval([cache.keys for cache in state.layers])
        questions(model, "fill+sorted", state, config, asked)


if __name__ == "__main__":
    main()
