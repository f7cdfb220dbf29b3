"""Speed and memory of stock mlx-lm and lazymlx presets on random-weight Llama shapes, on a GPU.

No weights reach the GPU machine, so this times the shapes only (accuracy is judged on the real
model with `lazymlx eval`). Every answer goes through `lazymlx.stream_generate`, the path users
run (lazymlx/evals/outcome.py's run_once, as `lazymlx bench` times it): stock mlx-lm with
lazy=None, a preset with lazy= its config, each with the request's checks, the lazy context's
memory check, the chat template's window and the TTFT clock users see. The prompt is random
token ids, read by a tokenizer that names every id (lazymlx/models/tiny.py: numbered_tokenizer),
with no end of sequence, so every answer runs `--gen-len` tokens. Per shape and length: one
untimed warm-up of every mode at that length, then `--repeats` rounds of all modes back to
back; each run reports TTFT, decode tok/s as mlx-lm reports it, the wall time of the whole
answer, peak memory and the prefill compute fraction (the engine's work share).

    PYTHONPATH=/tmp/site python3 benchmarks/gpu/llama_shapes.py --shapes 1b,8b --lengths 8k,32k \
        --modes baseline,keep-all,default,fast,qwen2.5-coder-0.5b:default --gen-len 256 --repeats 2 \
        --output $OUT/gpu.json

`--bits 4` quantizes the weights as mlx-community's 4-bit models are (group 64), activations bf16.

A mode is stock mlx-lm ("baseline"), a built-in preset, MODEL:PRESET, a registry model's
calibrated preset timed on these shapes (its schedule is a fraction of depth, so it transfers),
or a rule in calibrate's grammar. On random weights the attention is spread, so a mass rule keeps
most tokens; its ranking's cost is timed against the top-k rule's with the same ratios as its
ceilings ("mass0.999 0.5@24% 0.3@57% sparse" keeps what "0.5@24% 0.3@57% sparse" keeps, after
the sort, cumulative sum and host sync that choose the count).
The report is rewritten after every length, so a run cut short keeps what it measured.
`--shapes tiny` (4 layers, a 512-word vocabulary) runs the same path in seconds on a CPU.
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
from mlx_lm.models import llama

from lazymlx.engine.config import LazyConfig
from lazymlx.evals.choice import preset_or_candidate
from lazymlx.evals.outcome import run_once
from lazymlx.evals.timing import header
from lazymlx.lengths import parse_lengths
from lazymlx.models.tiny import numbered_tokenizer

LLAMA_VOCAB = 128256
SHAPES = {
    "1b": dict(hidden_size=2048, num_hidden_layers=16, intermediate_size=8192),
    "8b": dict(hidden_size=4096, num_hidden_layers=32, intermediate_size=14336),
    # the same path in seconds on a CPU: a check that the script runs, not a measurement
    "tiny": dict(hidden_size=256, num_hidden_layers=4, intermediate_size=512, vocab_size=512),
}


def build(shape: str, bits: int = 0) -> llama.Model:
    """The shape with random weights in bf16, or quantized to MLX's `bits`-bit weights (group
    64, as mlx-community's 4-bit and 8-bit models are)."""
    args = llama.ModelArgs(
        model_type="llama",
        num_attention_heads=32,
        num_key_value_heads=8,
        rms_norm_eps=1e-5,
        rope_theta=500000.0,
        max_position_embeddings=131072,
        tie_word_embeddings=False,
        **({"vocab_size": LLAMA_VOCAB} | SHAPES[shape]),
    )
    model = llama.Model(args)
    model.set_dtype(mx.bfloat16)
    if bits:
        nn.quantize(model, group_size=64, bits=bits)
    mx.eval(model.parameters())
    return model


def preset(mode: str) -> LazyConfig:
    """A built-in preset ("fast"), a registry model's calibrated one ("MODEL:default"), or a
    rule written as calibrate's candidates are ("mass0.999 0.5@24% 0.3@57% sparse")."""
    model, _, name = mode.rpartition(":")
    return preset_or_candidate(name, model or None)


def random_prompt(model: llama.Model, length: int, seed: int) -> list[int]:
    """`length` token ids drawn from the model's whole vocabulary."""
    vocab = model.args.vocab_size
    return mx.random.randint(0, vocab, (length,), key=mx.random.key(seed)).tolist()


def run(model, tokenizer, prompt: list[int], mode: str, gen_len: int) -> dict:
    """One answer through lazymlx.stream_generate: stock mlx-lm ("baseline") or a preset."""
    mx.clear_cache()
    start = time.perf_counter()
    done = run_once(model, tokenizer, prompt, gen_len, None if mode == "baseline" else preset(mode))
    return {
        "mode": mode,
        "ttft_s": done.ttft_s,
        "decode_tps": done.generation_tps,
        "answer_s": time.perf_counter() - start,
        "peak_gb": done.peak_memory_gb,
        "compute_fraction": done.compute_fraction,
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


def shape_list(text: str) -> list[str]:
    """--shapes: names of SHAPES, comma-separated (argparse says which one it does not know)."""
    names = text.split(",")
    unknown = [name for name in names if name not in SHAPES]
    if unknown:
        raise argparse.ArgumentTypeError(f"no shape {unknown[0]!r}; choose of {', '.join(SHAPES)}")
    return names


def arguments(shapes: str, gen_len: int) -> argparse.ArgumentParser:
    """The options both GPU scripts take (kept_shapes.py adds its own): shapes, prompt lengths,
    the answer's tokens, rounds and the report's path."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=shapes, type=shape_list, help=f"of {', '.join(SHAPES)}")
    parser.add_argument("--lengths", default="8k,32k")
    parser.add_argument("--gen-len", type=int, default=gen_len)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--output", required=True)
    return parser


def main() -> None:
    parser = arguments(shapes="1b,8b", gen_len=256)
    parser.add_argument(
        "--modes", default="baseline,keep-all,default,fast,qwen2.5-coder-0.5b:default"
    )
    parser.add_argument("--bits", type=int, default=0, help="quantize the weights (4, 8)")
    args = parser.parse_args()
    modes = args.modes.split(",")
    report = header(
        f"random-weight Llama shapes, {f'{args.bits}-bit weights' if args.bits else 'bf16'}",
        gen_len=args.gen_len,
        repeats=args.repeats,
        presets={m: preset(m).describe() for m in modes if m != "baseline"},
    )
    rows = []
    for shape in args.shapes:
        model = build(shape, args.bits)
        tokenizer = numbered_tokenizer(model.args.vocab_size)
        for length in parse_lengths(args.lengths):
            prompt = random_prompt(model, length, seed=length)
            for mode in modes:  # warm-up at the timed length: allocations, kernel compilation
                run(model, tokenizer, prompt, mode, 8)
            runs = {mode: [] for mode in modes}
            for _ in range(args.repeats):
                for mode in modes:
                    runs[mode].append(run(model, tokenizer, prompt, mode, args.gen_len))
            rows += medians(shape, length, runs)
            with open(args.output, "w") as file:
                json.dump(report | {"rows": rows}, file, indent=1)
        del model


if __name__ == "__main__":
    main()
