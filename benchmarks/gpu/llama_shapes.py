"""Speed and memory of stock mlx-lm and lazymlx presets on random-weight Llama shapes, on a GPU.

No weights reach the GPU machine, so this times the shapes only (accuracy is judged on the real
model with `lazymlx eval`). Both paths are mlx-lm's generate_step: stock with its KV cache, lazy
with lazymlx's LazyModel over a LazyState (the same wrapper `lazymlx.stream_generate` uses). Per
shape and length: one untimed warm-up of every mode at that length, then `--repeats` rounds of
all modes back to back; each run reports TTFT, decode tok/s over `--gen-len` tokens after the
first, the wall time of the whole answer, peak memory and the prefill compute fraction.

    PYTHONPATH=/tmp/site python3 benchmarks/gpu/llama_shapes.py --shapes 1b,8b --lengths 8k,32k \
        --modes baseline,keep-all,default,fast,qwen2.5-coder-0.5b:default --gen-len 256 --repeats 2 \
        --output $OUT/gpu.json

`--bits 4` quantizes the weights as mlx-community's 4-bit models are (group 64), activations bf16.

A mode is stock mlx-lm ("baseline"), a built-in preset, or MODEL:PRESET, a registry model's
calibrated preset timed on these shapes (its schedule is a fraction of depth, so it transfers).
The report is rewritten after every length, so a run cut short keeps what it measured.
"""

from __future__ import annotations

import lazymlx  # noqa: F401  first: it sets MLX's CUDA cache checks before MLX starts

# isort: split
import argparse
import json
import statistics
import time

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.generate import generate_step
from mlx_lm.models import llama

from lazymlx import LazyState
from lazymlx.engine.config import LazyConfig
from lazymlx.engine.model import LazyModel
from lazymlx.engine.presets import resolve_preset
from lazymlx.evals.timing import header
from lazymlx.lengths import parse_lengths

SHAPES = {
    "1b": dict(hidden_size=2048, num_hidden_layers=16, intermediate_size=8192),
    "8b": dict(hidden_size=4096, num_hidden_layers=32, intermediate_size=14336),
}


def build(shape: str, bits: int = 0) -> llama.Model:
    """The shape with random weights in bf16, or quantized to MLX's `bits`-bit weights (group
    64, as mlx-community's 4-bit and 8-bit models are)."""
    args = llama.ModelArgs(
        model_type="llama",
        num_attention_heads=32,
        num_key_value_heads=8,
        rms_norm_eps=1e-5,
        vocab_size=128256,
        rope_theta=500000.0,
        max_position_embeddings=131072,
        tie_word_embeddings=False,
        **SHAPES[shape],
    )
    model = llama.Model(args)
    model.set_dtype(mx.bfloat16)
    if bits:
        nn.quantize(model, group_size=64, bits=bits)
    mx.eval(model.parameters())
    return model


def preset(mode: str) -> LazyConfig:
    """A built-in preset ("fast") or a registry model's calibrated one ("MODEL:default")."""
    model, _, name = mode.rpartition(":")
    return resolve_preset(name, model or None)


def run(model, prompt: mx.array, mode: str, gen_len: int) -> dict:
    """One generation: stock mlx-lm ("baseline") or a lazymlx preset."""
    mx.clear_cache()
    mx.reset_peak_memory()
    cache, wrapped = None, model
    if mode != "baseline":
        cache = LazyState(model)
        wrapped = LazyModel(model, cache, preset(mode), prompt.size, 2048)
    start = time.perf_counter()
    steps = generate_step(prompt, wrapped, max_tokens=gen_len, prompt_cache=cache)
    next(steps)
    ttft = time.perf_counter() - start
    for _ in steps:
        pass
    total = time.perf_counter() - start
    layers = len(model.layers)
    return {
        "mode": mode,
        "ttft_s": ttft,
        "decode_tps": (gen_len - 1) / (total - ttft),
        "answer_s": total,
        "peak_gb": mx.get_peak_memory() / 1e9,
        "compute_fraction": 1.0 if cache is None else wrapped.counts.pairs / (prompt.size * layers),
    }


def medians(shape: str, length: int, runs: dict[str, list[dict]]) -> list[dict]:
    """One row per mode: each measurement's median over the mode's rounds, printed as it comes."""
    rows = []
    for mode, measured in runs.items():
        row = {"shape": shape, "prompt_tokens": length, "mode": mode}
        for key in measured[0]:
            if key != "mode":
                row[key] = statistics.median(r[key] for r in measured)
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="1b,8b")
    parser.add_argument("--lengths", default="8k,32k")
    parser.add_argument(
        "--modes", default="baseline,keep-all,default,fast,qwen2.5-coder-0.5b:default"
    )
    parser.add_argument("--gen-len", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--bits", type=int, default=0, help="quantize the weights (4, 8)")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    modes = args.modes.split(",")
    report = header(
        f"random-weight Llama shapes, {f'{args.bits}-bit weights' if args.bits else 'bf16'}",
        gen_len=args.gen_len,
        repeats=args.repeats,
        presets={m: preset(m).describe() for m in modes if m != "baseline"},
    )
    rows = []
    for shape in args.shapes.split(","):
        model = build(shape, args.bits)
        for length in parse_lengths(args.lengths):
            prompt = mx.random.randint(0, 128256, (length,), key=mx.random.key(length))
            for mode in modes:  # warm-up at the timed length: allocations, kernel compilation
                run(model, prompt, mode, 8)
            runs = {mode: [] for mode in modes}
            for _ in range(args.repeats):
                for mode in modes:
                    runs[mode].append(run(model, prompt, mode, args.gen_len))
            rows += medians(shape, length, runs)
            with open(args.output, "w") as file:
                json.dump(report | {"rows": rows}, file, indent=1)
        del model


if __name__ == "__main__":
    main()
