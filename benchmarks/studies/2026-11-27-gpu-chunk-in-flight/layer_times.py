"""Where a pruned prompt step's time goes on a GPU: its TTFT against what its compute predicts.

A schedule that computes a fraction f of the prompt's (token, layer) pairs would, if time went
with work, cut TTFT to f of stock's. This measures, on a random-weight Llama shape (speed only):
- TTFT of stock mlx-lm, of the engine's layer-major prompt step with pruning off, and with the
  schedule, each a median of `--repeats` after a warm-up at the length;
- per layer, with the device synchronised after each (for attribution only: it stops the host
  building a chunk while the device runs the last), the schedule's time at the tokens that reach
  the layer, against the unpruned step's time for that layer run over as many tokens (a prompt
  of that length). Their sum is the time the schedule's work takes at the engine's own per-layer
  speed, so `limit` = the unpruned layers' sum / that sum is the speedup the work predicts
  (attention's quadratic share included), and `efficiency` = the measured speedup over the
  engine's own unpruned step / limit (`speedup` is over stock mlx-lm);
- rope at scattered positions (the pruned tokens' path) against one run, at each kept count.

    PYTHONPATH=/tmp/site python3 benchmarks/studies/2026-11-27-gpu-chunk-in-flight/layer_times.py --shape 8b --lengths 8k,32k \
        --mode qwen2.5-coder-0.5b:default --output $OUT/layer_times.json
"""

from __future__ import annotations

import lazymlx  # noqa: F401  first: it sets MLX's CUDA cache checks before MLX starts

# isort: split
import argparse
import itertools
import json
import statistics
import time

import mlx.core as mx
from llama_shapes import build, preset
from mlx_lm.generate import generate_step

from lazymlx import LazyState
from lazymlx.engine.blocks import rope_at
from lazymlx.engine.prefill import prompt_step
from lazymlx.engine.presets import resolve_preset
from lazymlx.evals.timing import header
from lazymlx.lengths import parse_lengths


def stock_ttft(model, prompt: mx.array) -> float:
    start = time.perf_counter()
    next(generate_step(prompt, model, max_tokens=1))
    return time.perf_counter() - start


def engine_ttft(model, prompt: mx.array, config) -> float:
    """The engine's prompt step alone, as the decode loop's first call runs it."""
    state = LazyState(model)
    start = time.perf_counter()
    mx.eval(prompt_step(state, prompt, config).logits)
    return time.perf_counter() - start


def per_layer(model, prompt: mx.array, config) -> tuple[list[float], list[int]]:
    """Seconds per layer (the device synchronised after each) and the tokens computed there."""
    state = LazyState(model)
    state.record = []
    stamps = [time.perf_counter()]

    def progress(done: int, total: int) -> None:
        mx.synchronize()
        stamps.append(time.perf_counter())

    mx.eval(prompt_step(state, prompt, config, progress=progress).logits)
    times = [b - a for a, b in itertools.pairwise(stamps)]
    return times, [len(positions) for _, positions in state.record]


def median(function, repeats: int) -> float:
    function()  # warm-up at the timed length
    return statistics.median(function() for _ in range(repeats))


def rope_row(model, count: int, repeats: int) -> dict:
    """mx.fast.rope over `count` tokens' queries as one run and at scattered positions."""
    attn = model.layers[0].self_attn
    heads, dim = attn.n_heads, attn.head_dim
    x = mx.random.normal((1, heads, count, dim)).astype(mx.bfloat16)
    spread = mx.sort(mx.random.permutation(4 * count)[:count]).astype(mx.int32)
    row = {"tokens": count}
    for name, positions, first in (("run_ms", None, 0), ("scattered_ms", spread, None)):
        mx.eval(rope_at(attn.rope, x, positions, first))
        start = time.perf_counter()
        for _ in range(repeats):
            mx.eval(rope_at(attn.rope, x, positions, first))
        row[name] = (time.perf_counter() - start) / repeats * 1e3
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="8b")
    parser.add_argument("--lengths", default="8k,32k")
    parser.add_argument("--mode", default="qwen2.5-coder-0.5b:default")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    config, off = preset(args.mode), resolve_preset("keep-all", None)
    model = build(args.shape)
    report = header("random-weight Llama shapes, bf16", shape=args.shape, mode=args.mode)
    report |= {"schedule": config.describe(), "lengths": [], "rope": []}
    for length in parse_lengths(args.lengths):
        prompt = mx.random.randint(0, 128256, (length,), key=mx.random.key(length))
        stock = median(lambda p=prompt: stock_ttft(model, p), args.repeats)
        whole = median(lambda p=prompt: engine_ttft(model, p, off), args.repeats)
        lazy = median(lambda p=prompt: engine_ttft(model, p, config), args.repeats)
        per_layer(model, prompt, config)  # warm-up
        lazy_layers, counts = per_layer(model, prompt, config)
        whole_layers = {}
        for count in sorted(set(counts)):  # the unpruned step at each kept count
            short = prompt[:count]
            per_layer(model, short, off)
            whole_layers[count] = per_layer(model, short, off)[0]
        ideal = [whole_layers[n][layer] for layer, n in enumerate(counts)]
        fraction = sum(counts) / (length * len(counts))
        limit = sum(whole_layers[length]) / sum(ideal)
        row = {
            "prompt_tokens": length,
            "stock_s": stock,
            "unpruned_s": whole,
            "pruned_s": lazy,
            "speedup": stock / lazy,
            "compute_fraction": fraction,
            "pairs_limit": 1 / fraction,
            "limit": limit,
            "engine_speedup": whole / lazy,
            "efficiency": whole / lazy / limit,
            "layers": [
                {"layer": layer, "tokens": n, "pruned_ms": t * 1e3, "unpruned_ms": u * 1e3}
                for layer, (n, t, u) in enumerate(zip(counts, lazy_layers, ideal, strict=True))
            ],
        }
        summary = {k: v for k, v in row.items() if k != "layers"}
        print(json.dumps(summary), flush=True)
        report["lengths"].append(row)
        for count in sorted(set(counts) - {length}):
            report["rope"].append(rope_row(model, count, 20))
            print(json.dumps(report["rope"][-1]), flush=True)
        with open(args.output, "w") as file:
            json.dump(report, file, indent=1)


if __name__ == "__main__":
    main()
