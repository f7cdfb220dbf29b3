"""A long chat on the real model: memory must stay flat, every turn must be answered.

200 short everyday turns through one ChatSession (the chat command's engine) with a context cap,
so the oldest turns are dropped as a real long chat would need. Every 50 turns it reports the
peak and active memory of that stretch, the context size and the turns dropped so far.

    .venv/bin/python benchmarks/studies/2026-11-22-engine-v2/soak.py --turns 200 --output benchmarks/results/soak.json
"""

from __future__ import annotations

import lazymlx  # first: it binds OpenBLAS, which only works before anything imports MLX

# isort: split
import argparse
import json
import time

import mlx.core as mx

from lazymlx.engine.presets import resolve_preset
from lazymlx.evals.timing import header
from lazymlx.session import ChatSession

QUESTIONS = (
    "What is the capital of France?",
    "Name a fruit that is yellow.",
    "What is 2 + 2?",
    "Say hello in Spanish.",
    "What colour is the sky?",
    "Give me one word that rhymes with cat.",
    "How many legs does a spider have?",
    "What do bees make?",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--lazy", default="default")
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--max-context", type=int, default=2048)
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    model, tokenizer = lazymlx.load(args.model)
    config = None if args.lazy == "off" else resolve_preset(args.lazy, args.model)
    session = ChatSession(
        model, tokenizer, lazy=config, max_context=args.max_context, max_tokens=args.max_tokens
    )
    rows, empty, start = [], 0, time.perf_counter()
    mx.reset_peak_memory()
    for turn in range(1, args.turns + 1):
        reply = "".join(r.text for r in session.send(QUESTIONS[turn % len(QUESTIONS)]))
        empty += not reply.strip()
        if turn % args.every == 0:
            rows.append(
                {
                    "turn": turn,
                    "peak_memory_gb": mx.get_peak_memory() / 1e9,
                    "active_memory_gb": mx.get_active_memory() / 1e9,
                    "context_tokens": session.context.cache[0].offset,
                    "dropped_turns": session.dropped_turns,
                    "seconds": time.perf_counter() - start,
                }
            )
            print(json.dumps(rows[-1]), flush=True)
            mx.reset_peak_memory()
    with open(args.output, "w") as f:
        json.dump(
            {
                "header": header(args.model, lazy=args.lazy, max_context=args.max_context),
                "empty_replies": empty,
                "rows": rows,
            },
            f,
            indent=1,
        )


if __name__ == "__main__":
    main()
