"""Why a completed lazy context's first question was slow on a GPU, and that it no longer is.

Three 64-token questions in a row over one context, each one's TTFT: stock mlx-lm's KV cache, a
lazy context that pruned nothing (preset "keep-all", then named "off"), and one pruned by Qwen2.5-Coder's calibrated
default and completed by idle `fill` units, as the apps run them. Two variants of the completed
one test where a first question's extra time came from: the allocator (`mx.clear_cache()`
after completion) and the stream (completion on mlx-lm's generation stream, where the question
runs). Run under `MLX_CUDA_GRAPH_CACHE_SIZE=400` and `=4000` it also tested MLX's CUDA graph
cache (no difference). Before the fix the first question took 144-287 ms against stock's
36-47 ms, 41-49 ms with the allocator cleared, and the second process aborted on MLX's
cuDNN-plan cache check; lazymlx now writes out masked attention on CUDA and clears the cache
when a completion ends (benchmarks/README.md, "GPU"). Two rounds; the first compiles kernels.
One line per measurement (the results file keeps the output).

    PYTHONPATH=/tmp/site python3 benchmarks/studies/2026-11-26-gpu-masked-attention/question_after_completion.py 8b 32768
"""

from __future__ import annotations

import lazymlx  # noqa: F401  first: it sets MLX's CUDA cache checks before MLX starts

# isort: split
import os
import sys
import time

import mlx.core as mx
from kept_shapes import ask
from llama_shapes import build, preset
from mlx_lm.generate import generation_stream
from mlx_lm.models.cache import make_prompt_cache

from lazymlx import LazyState
from lazymlx.engine import complete


def questions(model, label: str, cache, config, asked: list[mx.array], idle_s: float) -> None:
    times = [ask(model, cache, config, question, 2)[0] for question in asked]
    idle = f" (idle {idle_s:.2f}s)" if idle_s else ""
    print(label, " ".join(f"{1000 * t:.1f}ms" for t in times) + idle, flush=True)


def completed(
    model, config, document: mx.array, stream: mx.Stream | None
) -> tuple[LazyState, float]:
    """The document's context, completed by paced idle units (on `stream`, if given)."""
    state = LazyState(model)
    ask(model, state, config, document, 1)
    start = time.perf_counter()
    with mx.stream(stream or mx.default_stream(mx.default_device())):
        while complete.step(state, config):
            pass
    return state, time.perf_counter() - start


def main() -> None:
    shape, length = sys.argv[1], int(sys.argv[2])
    settings = {
        k: os.environ.get(k, "unset") for k in ("MLX_CUDA_GRAPH_CACHE_SIZE", "MLX_USE_CUDA_GRAPHS")
    }
    print("#", shape, length, settings, flush=True)
    model = build(shape)
    config, off = preset("qwen2.5-coder-0.5b:default"), preset("keep-all")
    document = mx.random.randint(0, 128256, (length,))
    asked = [mx.random.randint(0, 128256, (64,), key=mx.random.key(i)) for i in range(3)]
    for _ in range(2):
        cache = make_prompt_cache(model)
        ask(model, cache, None, document, 1)
        questions(model, "stock", cache, None, asked, 0.0)
        state = LazyState(model)
        ask(model, state, off, document, 1)
        questions(model, "lazy-off", state, off, asked, 0.0)
        state, idle = completed(model, config, document, None)
        questions(model, "fill", state, config, asked, idle)
        state, idle = completed(model, config, document, None)
        mx.clear_cache()
        questions(model, "fill+clear_cache", state, config, asked, idle)
        state, idle = completed(model, config, document, generation_stream)
        questions(model, "fill@generation_stream", state, config, asked, idle)
        del state, cache


if __name__ == "__main__":
    main()
