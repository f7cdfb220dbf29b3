"""A question over a kept context on a GPU: its TTFT against stock's, with and without idle completion.

The speed half of benchmarks/kept_context.py on random-weight Llama shapes (no weights reach the
GPU machine; the answers are judged on the real models on the CPU). A document of random tokens
is computed on its own and kept; then a question of `--question-len` tokens is asked over it.
Both go through `lazymlx.stream_generate` with the context as its prompt cache, as an app keeps
one (llama_shapes.py says what that path checks and times). Stock mlx-lm asks over its whole
KV cache; a preset asks over the pruned context as the document's step left it ("no idle": its
prompt step revives what it needs, on the critical path), or after idle completion by `fill`,
run a paced unit at a time as the chat and `LLM` run it between requests
(lazymlx/engine/complete.py). Per mode: the document's TTFT, the completion's idle seconds and
its longest unit (how long a request arriving meanwhile waits at most), the question's TTFT,
its decode tok/s over `--gen-len` tokens as mlx-lm reports it, and the peak memory of the
whole mode. One untimed warm-up of every mode at each length, then `--repeats` rounds of all
modes back to back; medians. `--shapes tiny` runs the same path in seconds on a CPU.

    PYTHONPATH=/tmp/site python3 benchmarks/gpu/kept_shapes.py --shapes 8b --lengths 8k,32k \\
        --lazy default,fast,qwen2.5-coder-0.5b:default --output $OUT/kept.json
"""

from __future__ import annotations

import lazymlx  # noqa: F401  first: it sets MLX's CUDA cache checks before MLX starts

# isort: split
import json
import time
from dataclasses import replace

import mlx.core as mx
from llama_shapes import arguments, build, medians, preset, random_prompt
from mlx_lm.models.cache import make_prompt_cache

from lazymlx import LazyState
from lazymlx.engine import complete
from lazymlx.evals.outcome import run_once
from lazymlx.evals.timing import header
from lazymlx.lengths import parse_lengths
from lazymlx.models.tiny import numbered_tokenizer


def run(model, tokenizer, prompts: tuple[list[int], list[int]], mode: str, config, gen_len: int):
    """The document, idle completion a unit at a time, then the question over the context."""
    document, question = prompts
    mx.clear_cache()
    cache = make_prompt_cache(model) if config is None else LazyState(model)
    first = run_once(model, tokenizer, document, 1, config, prompt_cache=cache)
    units = []
    while config is not None and complete.pending(cache, config):
        start = time.perf_counter()
        complete.step(cache, config)
        units.append(time.perf_counter() - start)
    # each call resets the peak: the document's and completion's are read before the question
    peak = max(first.peak_memory_gb, mx.get_peak_memory() / 1e9)
    later = run_once(model, tokenizer, question, gen_len, config, prompt_cache=cache)
    return {
        "mode": mode,
        "document_ttft_s": first.ttft_s,
        "idle_s": sum(units),
        "units": len(units),
        "longest_unit_s": max(units, default=0.0),
        "question_ttft_s": later.ttft_s,
        "decode_tps": later.generation_tps,
        "peak_gb": max(peak, later.peak_memory_gb),
    }


def modes(presets: list[str]) -> list[tuple[str, object]]:
    runs: list[tuple[str, object]] = [("stock", None)]
    for name in presets:
        config = preset(name)
        for policy, label in (("never", "no idle"), ("fill", "fill")):
            runs.append((f"{name} {label}", replace(config, complete=policy)))
    return runs


def main() -> None:
    parser = arguments(shapes="8b", gen_len=64)
    parser.add_argument("--lazy", default="default,fast,qwen2.5-coder-0.5b:default")
    parser.add_argument("--question-len", type=int, default=64)
    parser.description = __doc__.splitlines()[0]
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
    for shape in args.shapes:
        model = build(shape)
        tokenizer = numbered_tokenizer(model.args.vocab_size)
        for length in parse_lengths(args.lengths):
            prompts = (
                random_prompt(model, length, length),
                random_prompt(model, args.question_len, 1),
            )
            for mode, config in runs:  # warm-up at the timed length
                run(model, tokenizer, prompts, mode, config, 4)
            timed = {mode: [] for mode, _ in runs}
            for _ in range(args.repeats):
                for mode, config in runs:
                    timed[mode].append(run(model, tokenizer, prompts, mode, config, args.gen_len))
            rows += medians(shape, length, timed)
            with open(args.output, "w") as file:
                json.dump(report | {"rows": rows}, file, indent=1)
        del model


if __name__ == "__main__":
    main()
