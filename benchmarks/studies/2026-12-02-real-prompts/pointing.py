"""How sharply each prompt's question points at its text, layer by layer, as the engine reads it:
the prompt step run through stream_generate under a rule whose first cut never comes
(`point` 1.0: every candidate layer is read and the prompt runs whole), the pointing strength
spied at each candidate layer. Stock's first answer token beside it.

    .venv/bin/python benchmarks/studies/2026-12-02-real-prompts/pointing.py \
        --model qwen2.5-coder-0.5b --length 2048 --families real-option,summary --seeds 3 \
        --rule "mass0.8 1@24% 1@57% least0.25" --out pointing_qwen_2k.jsonl
"""

from __future__ import annotations

import lazymlx  # first: binds OpenBLAS

# isort: split
import argparse
import json
from dataclasses import replace
from pathlib import Path

import mlx.core as mx

from lazymlx.engine import policy
from lazymlx.engine.cache import LazyState
from lazymlx.engine.presets import resolve_preset
from lazymlx.evals.calibrate import candidate_config
from lazymlx.evals.cases import VALIDATION_SEED, make_case, prompt_tokens
from lazymlx.generation import stream_generate


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--length", type=int, default=2048)
    parser.add_argument("--families", required=True)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--split", default="calibration")
    parser.add_argument("--rule", default="mass0.8 1@24% 1@57% least0.25")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    model, tokenizer = lazymlx.load(args.model)
    base = resolve_preset("default", args.model)
    config = replace(candidate_config(base, args.rule), point=1.0, min_prompt=0)
    out = Path(args.out)
    done = set()
    if out.exists():
        done = {(r["family"], r["seed"]) for r in map(json.loads, out.read_text().splitlines())}
    first = 0 if args.split == "calibration" else VALIDATION_SEED
    strengths: list[float] = []
    original = policy.pointing

    def spy(peak, eligible):
        found = original(peak, eligible)
        strengths.append(found[0])
        return found

    policy.pointing = spy
    for family in args.families.split(","):
        for seed in range(first, first + args.seeds):
            if (family, seed) in done:
                continue
            case = make_case(family, tokenizer, args.length, seed, args.split)
            if len(case.segments) > 1:
                continue
            strengths.clear()
            tokens = prompt_tokens(tokenizer, case)
            reply = "".join(
                r.text for r in stream_generate(model, tokenizer, tokens, 12, lazy=config)
            )
            record = {
                "family": family,
                "seed": seed,
                "tokens": len(tokens),
                "layers": LazyState(model).first_cuts(config),
                "strengths": [round(s, 4) for s in strengths],
                "reply": reply,
                "correct": case.correct(reply),
            }
            with out.open("a") as log:
                log.write(json.dumps(record) + "\n")
            cells = " ".join(f"{s:.2f}" for s in strengths)
            print(f"{family} {seed} {record['correct']} | {cells}", flush=True)
            mx.clear_cache()


if __name__ == "__main__":
    main()
