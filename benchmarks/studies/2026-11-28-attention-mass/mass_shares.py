"""How much of each prompt a mass rule keeps at the first pruning layer: the share of the prompt's
tokens whose pooled scores hold p of the attention mass (the engine's own scores, sinks and the
last token aside), for several p at once, on the eval's calibration cases.

    .venv/bin/python benchmarks/studies/2026-11-28-attention-mass/mass_shares.py \
        --model qwen2.5-coder-0.5b --length 2048 --depth 0.24 --out shares_qwen_2k_at_24.json
"""

from __future__ import annotations

import lazymlx  # first: binds OpenBLAS

# isort: split
import argparse
import json

import mlx.core as mx

from lazymlx.engine import prefill
from lazymlx.engine.cache import LazyState
from lazymlx.engine.config import PRESETS
from lazymlx.evals.cases import make_case
from lazymlx.evals.families import GROUPS
from lazymlx.generation import encode_prompt

SHARES = (0.8, 0.9, 0.95, 0.98, 0.99)


class Seen(Exception):
    pass


def first_prompt(tokenizer, case) -> list[int]:
    """The case's first prompt step as the runner feeds it (chat: through the template)."""
    if case.kind == "chat":
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": case.segments[0]}],
            add_generation_prompt=True,
            tokenize=False,
        )
        return tokenizer.encode(text, add_special_tokens=False)
    return encode_prompt(tokenizer, case.segments[0]).tolist()


def shares_at_first_prune(model, tokens: list[int], depth: float) -> dict[str, float]:
    config = lazymlx.LazyConfig(
        **{
            **PRESETS["gentle"].__dict__,
            "schedule": ((depth, 1.0),),
            "mass": 0.5,
            "min_keep": 0,
            "least": 0.0,
        }
    )
    seen = {}
    original = prefill.mass_count

    def spy(scores, forced, bounds, mass):
        free = mx.where(forced, 0.0, scores.astype(mx.float32)) if forced is not None else scores
        held = mx.cumsum(mx.sort(mx.maximum(free, 0.0))[::-1])
        n = scores.size
        for p in SHARES:
            seen[str(p)] = (int(mx.sum(held < p * held[-1]).item()) + 1) / n
        raise Seen

    prefill.mass_count = spy
    try:
        state = LazyState(model)
        prefill.prompt_step(state, mx.array(tokens), config)
    except Seen:
        pass
    finally:
        prefill.mass_count = original
    return seen


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--length", type=int, default=2048)
    parser.add_argument("--depth", type=float, default=0.24)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    model, tokenizer = lazymlx.load(args.model)
    rows = []
    families = [f for f in GROUPS["scored"]]
    for family in families:
        for seed in range(args.seeds):
            try:
                case = make_case(family, tokenizer, args.length, seed, "calibration")
            except Exception as error:  # a chat family on a base model
                print(family, error)
                continue
            if case.kind == "chat" and tokenizer.chat_template is None:
                continue
            tokens = first_prompt(tokenizer, case)
            shares = shares_at_first_prune(model, tokens, args.depth)
            rows.append(
                {
                    "family": family,
                    "seed": seed,
                    "tokens": len(tokens),
                    "open": case.judge is not None,
                    **shares,
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    with open(args.out, "w") as out:
        json.dump(
            {"model": args.model, "length": args.length, "depth": args.depth, "rows": rows},
            out,
            indent=1,
        )


if __name__ == "__main__":
    main()
