"""A question over a kept document: its TTFT against stock's, with and without idle completion.

A document is computed on its own and kept (a context file, the server's kept conversation),
then asked a question. Stock mlx-lm asks it over its whole KV cache; a lazy preset asks it over
the pruned context as the document's step left it ("no idle": the question's prompt step
revives what it needs, on the critical path), or after idle time completed the context by
`fill` (each missing (token, layer) pair once). Per mode: the document's TTFT (the first turn, which completion never
touches), the completion's time (idle seconds, and its longest unit: how long a request
arriving meanwhile waits at most), the question's TTFT, decode tok/s and peak memory, and
whether the answer equals stock's and is right. The cases are the eval's `kept` family
(validation split: a fact planted in real documentation, asked after it). Modes run back to
back for each case, after a warm-up at the same length. `--question-repeats N` asks the
question N times over the same context, trimmed back between, and reports the median TTFT
(a question takes seconds where a document takes minutes, so one timing is noisy); with no
idle time only the first counts, since it revives part of the context for the next.

    .venv/bin/python benchmarks/kept_context.py --model qwen2.5-coder-0.5b --lengths 2k \\
        --output benchmarks/results/kept/qwen2.5-coder-0.5b_2k.json
"""

from __future__ import annotations

import lazymlx  # first: it binds OpenBLAS, which only works before anything imports MLX

# isort: split
import argparse
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache, trim_prompt_cache

from lazymlx.engine import complete
from lazymlx.engine.presets import resolve_preset
from lazymlx.evals.cases import make_case
from lazymlx.evals.timing import header
from lazymlx.generation import encode_prompt, stream_generate
from lazymlx.lengths import parse_lengths


def ask(model, tokenizer, cache, tokens: list[int], max_tokens: int, lazy) -> dict:
    """Stream an answer to `tokens` over `cache`; its TTFT, tokens, text and rates."""
    out, last = [], None
    for last in stream_generate(
        model, tokenizer, tokens, max_tokens, prompt_cache=cache, lazy=lazy
    ):
        out.append(last.token)
    return {
        "ttft_s": last.ttft_s,
        "tokens": out,
        "text": tokenizer.decode(out),
        "generation_tps": last.generation_tps if last.generation_tokens > 1 else None,
        "peak_memory_gb": last.peak_memory,
        "fraction": last.lazy.work_share if last.lazy else 1.0,
    }


def complete_timed(state, config) -> dict:
    """Complete the context a unit at a time, as idle time does; total and longest unit."""
    units = []
    while complete.pending(state, config):
        start = time.perf_counter()
        complete.step(state, config)
        units.append(time.perf_counter() - start)
    return {"idle_s": sum(units), "units": len(units), "longest_unit_s": max(units, default=0.0)}


def context_offset(cache) -> int:
    """Tokens in a context: a LazyState's own count, or stock's from its first layer's cache."""
    return cache.offset if isinstance(cache, lazymlx.LazyState) else cache[0].offset


def run_mode(model, tokenizer, case, mode: str, config, repeats: int = 1) -> dict:
    document = encode_prompt(tokenizer, case.segments[0]).tolist()
    question = tokenizer.encode(case.segments[1], add_special_tokens=False)
    mx.clear_cache()
    mx.reset_peak_memory()
    cache = make_prompt_cache(model) if config is None else lazymlx.LazyState(model)
    first = ask(model, tokenizer, cache, document, 1, config)
    idle = {"idle_s": 0.0, "units": 0, "longest_unit_s": 0.0}
    if config is not None and config.complete != "never":
        idle = complete_timed(cache, config)
    # the document's one answer token is in the cache already (mlx-lm feeds it before yielding)
    before = context_offset(cache)
    later = ask(model, tokenizer, cache, question, case.max_tokens, config)
    timed = [later["ttft_s"]]
    if config is not None and config.complete == "never":
        repeats = 1  # the first ask revived part of the context: a second would find it there
    for _ in range(repeats - 1):  # the same question again over the same context
        trim_prompt_cache(cache, context_offset(cache) - before)
        timed.append(ask(model, tokenizer, cache, question, case.max_tokens, config)["ttft_s"])
    return {
        "mode": mode,
        "document_tokens": len(document),
        "question_tokens": len(question),
        "document_ttft_s": first["ttft_s"],
        "document_fraction": first["fraction"],
        **idle,
        "question_ttft_s": statistics.median(timed),
        "question_ttft_each_s": timed,
        "generation_tps": later["generation_tps"],
        "peak_memory_gb": later["peak_memory_gb"],
        "answer": later["text"],
        "answer_tokens": later["tokens"],
        "correct": case.correct(later["text"]),
    }


def modes(presets: list[str], model_name: str, policies: list[str]) -> list[tuple[str, object]]:
    runs: list[tuple[str, object]] = [("stock", None)]
    labels = {"never": "no idle", "fill": "fill"}
    for name in presets:
        config = resolve_preset(name, model_name)
        runs += [(f"{name} {labels[p]}", replace(config, complete=p)) for p in policies]
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--lengths", default="2k")
    parser.add_argument("--lazy", default="default,fast", help="presets, comma-separated")
    parser.add_argument("--cases", type=int, default=2, help="kept cases per length")
    parser.add_argument("--policies", default="never,fill", help="completion policies")
    parser.add_argument(
        "--question-repeats", type=int, default=1, help="times the question, trimmed back between"
    )
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    model, tokenizer = lazymlx.load(args.model)
    runs = modes(args.lazy.split(","), args.model, args.policies.split(","))
    head = header(args.model, presets={name: config.describe() for name, config in runs if config})
    rows = []
    for length in parse_lengths(args.lengths):
        cases = [
            make_case("kept", tokenizer, length, 1_000_000 + i, "validation")
            for i in range(args.cases)
        ]
        run_mode(model, tokenizer, cases[0], "warm-up", None)  # allocations at this length
        for case in cases:
            stock = None
            for mode, config in runs:
                row = run_mode(model, tokenizer, case, mode, config, args.question_repeats)
                stock = stock or row
                row |= {
                    "length": length,
                    "seed": case.seed,
                    "same_answer": row["answer_tokens"] == stock["answer_tokens"],
                    "question_speedup": stock["question_ttft_s"] / row["question_ttft_s"],
                    "document_speedup": stock["document_ttft_s"] / row["document_ttft_s"],
                }
                rows.append(row)
                print(
                    f"{length} #{case.seed} {mode}: document {row['document_ttft_s']:.1f} s, "
                    f"idle {row['idle_s']:.1f} s (longest unit {row['longest_unit_s']:.2f} s), "
                    f"question {row['question_ttft_s']:.2f} s "
                    f"({row['question_speedup']:.2f}x stock), answer {row['answer']!r}",
                    flush=True,
                )
                Path(args.output).write_text(json.dumps(head | {"rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
