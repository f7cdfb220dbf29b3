"""Do some heads rank the asked fact higher than all heads together? The retrieval-heads lead.

Retrieval heads (Wu et al., 2024) are the few heads that copy from the context what the query
asks for; if they exist at a pruning layer, scoring by them alone should rank the asked fact
higher than the mean over heads, which an early prune needs (at 24% of depth the mean ranks the
planted facts of real-text needles within the top 16-19%, and a fifth of a table dropped there
moves its answer: STUDIES.md). For each raw calibration case this runs a keep-all pass and, at
the given layers, ranks the prompt by each query head's attention from the step's last `window`
tokens (shaped as the preset shapes scores: pooled, segments), and by the mean over all heads.
Heads are then chosen per layer on the even seeds (the ones whose median share needed to keep
the asked fact whole is lowest) and checked on the odd seeds against the mean over all heads,
so the figure a reader sees is not the one the heads were picked on. Calibration cases only.

    .venv/bin/python benchmarks/head_ranks.py --lengths 1k --seeds 0,1,2,3 --lazy default \\
        --output benchmarks/results/studies/head_ranks_1k.json
"""

from __future__ import annotations

import lazymlx  # noqa: F401  (binds OpenBLAS before mlx is used)

# isort: split
import argparse
import json
import statistics

import mlx.core as mx
from diagnose import chosen_cases, keep_all_layers, needed_share, piece_rows

from lazymlx.bench import header
from lazymlx.blocks import attention_scores
from lazymlx.cli.app import load_model
from lazymlx.evals.families import make_case
from lazymlx.generation import encode_prompt
from lazymlx.prefill import Ranker
from lazymlx.presets import resolve_preset
from lazymlx.segments import segment_ends

COUNTS = (1, 2, 3)  # how many heads a layer's choice keeps


def head_probs(observed: mx.array, cache, scale: float) -> mx.array:
    """(heads, rows): each query head's attention from the observing tokens, the pruning score
    with that head alone as its retrieval head."""
    rows = cache.row_positions()
    mask = rows[None] <= rows[-observed.shape[2] :][:, None]
    keys = cache.fetch()[0]
    return mx.stack(
        [attention_scores(observed, keys, scale, mask, (h,)) for h in range(observed.shape[1])]
    )


def layer_probs(model, config, prompt: list[int], layers: list[int]) -> dict[int, mx.array]:
    """A keep-all pass; at each given layer, every head's attention over the prompt."""
    found = {}
    for layer, block, cache, observed in keep_all_layers(model, config, prompt):
        if layer in layers:
            found[layer] = head_probs(observed, cache, block.self_attn.scale)
            mx.eval(found[layer])
        if layer == max(layers):
            break
    return found


def share(ranker: Ranker, probs: mx.array, heads: list[int], tokens, rows) -> float:
    """The share of the prompt a prune must keep for `rows` to survive, scoring by `heads`."""
    return needed_share(ranker.shape(probs[mx.array(heads)].mean(axis=0), tokens), rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument(
        "--families",
        default="passkey,lookalike,twohop,needle-docs,needle-man,needle-pkgdoc,json,table,vartrack,code",
    )
    parser.add_argument("--lengths", default="1k")
    parser.add_argument("--seeds", default="0,1,2,3")
    parser.add_argument("--cases", help="family:length:seed,... (as diagnose.py)")
    parser.add_argument("--depths", default="0.24,0.4,0.57", help="depth fractions to rank at")
    parser.add_argument("--lazy", default="default")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    model, tokenizer = load_model(args.model)
    config = resolve_preset(args.lazy, args.model)
    num_layers = len(model.layers)
    layers = sorted({int(float(d) * num_layers) for d in args.depths.split(",")})
    if not all(0 <= layer < num_layers - 1 for layer in layers):
        raise SystemExit(
            f"error: --depths must each be in [0, 1): a depth picks one of the {num_layers} layers"
        )
    ranker = Ranker(config, 0, segment_ends(tokenizer))
    cases = []  # (family, length, seed, tokens, asked rows, {layer: (heads, rows) probs})
    chosen = list(chosen_cases(args))
    if len({seed % 2 for _, _, seed in chosen}) < 2:
        raise SystemExit("error: heads are chosen on even seeds and checked on odd ones; give both")
    for family, length, seed in chosen:
        case = make_case(family, tokenizer, length, seed, "calibration")
        if case.kind != "raw" or not case.planted:
            continue
        prompt = encode_prompt(tokenizer, case.segments[0]).tolist()
        asked = piece_rows(tokenizer, case, prompt)[0]
        probs = layer_probs(model, config, prompt, layers)
        cases.append((family, length, seed, mx.array(prompt), asked, probs))
        print(f"{family} {length} #{seed}: {len(prompt)} tokens", flush=True)
    if not cases:
        raise SystemExit(
            "error: no raw calibration case with a planted fact; pick other --families"
        )
    num_heads = next(iter(cases[0][5].values())).shape[0]
    everyone = list(range(num_heads))
    fit = [c for c in cases if c[2] % 2 == 0]
    check = [c for c in cases if c[2] % 2 == 1]
    report = {"header": header(args.model, lazy=args.lazy), "layers": {}}
    for layer in layers:
        per_head = [
            statistics.median(share(ranker, c[5][layer], [h], c[3], c[4]) for c in fit)
            for h in everyone
        ]
        order = sorted(everyone, key=lambda h: per_head[h])
        rows = []
        for family, length, seed, tokens, asked, probs in check:
            row = {
                "family": family,
                "length": length,
                "seed": seed,
                "all heads": share(ranker, probs[layer], everyone, tokens, asked),
            }
            for count in COUNTS:
                row[f"best {count}"] = share(ranker, probs[layer], order[:count], tokens, asked)
            rows.append(row)
        columns = ["all heads"] + [f"best {count}" for count in COUNTS]
        report["layers"][str(layer)] = {
            "fit median share per head": [round(s, 3) for s in per_head],
            "heads by fit": order,
            "check cases": rows,
            "check median": {k: round(statistics.median(r[k] for r in rows), 3) for k in columns},
            "check worst": {k: round(max(r[k] for r in rows), 3) for k in columns},
        }
        print(f"layer {layer}: heads {order[:3]}", report["layers"][str(layer)]["check median"],
              "worst", report["layers"][str(layer)]["check worst"], flush=True)  # fmt: skip
    with open(args.output, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
