"""Would the places that point at the pointed place find a chain's other links, and at what cost?

RULER's variable tracking (`VAR QPWLM = 12345 ... VAR BXKJA = VAR QPWLM ...`, asked which
variables hold 12345) is lost by the default: the question points at the value, the cut keeps
that link, and the chain's other links go. A link names the variable before it, so its tokens
may attend to that variable's own link: a rule could keep, beside the place the question points
at, the places whose tokens point into it, and so on, hop by hop.

One keep-all prompt step per case (stock's KV), every token's queries kept at the candidate
layers of the first cut; per layer, each row's sharp targets (a head paying at least --sharp of
its attention to one token more than NEAR before it, the sinks aside) are the edges. From the
place the question points at (policy.pointed_rows' rule: its queries' targets at the point, with
AROUND tokens either side) the probe walks the edges backwards (rows pointing into the set join
it with their neighbours) for up to --hops hops, and reports per hop how many tokens the set
holds and, for a chain, which links it holds. Real look-ups and a passkey run beside the chains:
the set's growth there is what such a rule would cost them.

    .venv/bin/python benchmarks/studies/2026-12-02-pointed-place/chains.py --cases 3 \
        --families chain,real-option,real-pick,real-function,passkey --out chains_qwen_2k.jsonl
"""

from __future__ import annotations

import lazymlx  # first: binds OpenBLAS

# isort: split
import argparse
import json
import random
from pathlib import Path

import mlx.core as mx
import numpy as np

from lazymlx.engine import policy, prefill
from lazymlx.engine.blocks import attention_probs
from lazymlx.engine.cache import LazyState
from lazymlx.engine.templates import question_length, template_tail
from lazymlx.evals.cases import make_case, prompt_tokens
from lazymlx.generation import encode_prompt

NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
SINKS = 4
ROWS = 256  # query rows per chunk of the attention written out


def chain_prompt(rng: random.Random, tokenizer, length: int, links: int = 5) -> tuple[str, list]:
    """RULER's variable tracking, one chain of `links` variables: the prompt (raw, its answer
    prefix last) and each link's statement."""
    names: list[str] = []
    while len(names) < links:
        name = "".join(rng.choices("ABCDEFGHIJKLMNOPQRSTUVWXYZ", k=5))
        if name not in names:
            names.append(name)
    value = str(rng.randint(10000, 99999))
    statements = [f"VAR {names[0]} = {value}"] + [
        f"VAR {b} = VAR {a}" for a, b in zip(names, names[1:], strict=False)
    ]
    per = len(tokenizer.encode(" " + NOISE))
    sentences = max(links + 1, (length - 120) // per)
    spots = sorted(rng.sample(range(sentences), links))
    parts, it = [], iter(statements)
    for i in range(sentences):
        parts.append(NOISE)
        if i in spots:
            parts.append(next(it) + ".")
    context = " ".join(parts)
    prompt = (
        "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n"
        f"{context}\nQuestion: Find all variables that are assigned the value {value} in the "
        "text above. Answer: According to the chain(s) of variable assignment in the text above, "
        f"{links} variables are assigned the value {value}, they are: "
    )
    return prompt, statements


def token_spans(tokenizer, tokens: list[int], needles: list[str]) -> list[list[int]]:
    """Each needle's first occurrence, as token indices."""
    pieces = [tokenizer.decode([t]) for t in tokens]
    starts, at = [], 0
    for piece in pieces:
        starts.append(at)
        at += len(piece)
    text = "".join(pieces)
    spans = []
    for needle in needles:
        hit = text.find(needle)
        stop = hit + len(needle)
        spans.append(
            [i for i, s in enumerate(starts) if hit >= 0 and s < stop and s + len(pieces[i]) > hit]
        )
    return spans


def edges(
    queries: mx.array, keys: mx.array, scale: float, sharp: float
) -> list[tuple[int, int, float]]:
    """(row, target, share): a head of `row` pays `target` that share, at least `sharp`, of its
    attention, the target more than NEAR before the row and past the sinks."""
    n = keys.shape[2]
    found = []
    for begin in range(0, n, ROWS):
        rows = mx.arange(begin, min(begin + ROWS, n))
        mask = mx.arange(n)[None] <= rows[:, None]
        probs = attention_probs(queries[:, :, begin : begin + ROWS], keys, scale, mask)
        peak = probs.max(axis=(0, 1))  # (rows, n)
        far = (mx.arange(n)[None] < rows[:, None] - policy.NEAR) & (mx.arange(n)[None] >= SINKS)
        held = np.array(mx.where(far, peak, 0.0))
        found += [
            (begin + int(r), int(t), float(held[r, t])) for r, t in np.argwhere(held >= sharp)
        ]
    return found


def grow(start: set[int], pairs: list[tuple[int, int, float]], hops: int, n: int) -> list[set[int]]:
    """The set after each hop: rows with an edge into it join with AROUND tokens either side."""
    sets, current = [set(start)], set(start)
    for _ in range(hops):
        joined = {row for row, target, _ in pairs if target in current and row not in current}
        if not joined:
            break
        current = current | {
            p
            for row in joined
            for p in range(max(0, row - policy.AROUND), min(n, row + policy.AROUND + 1))
        }
        sets.append(set(current))
    return sets


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--families", default="chain,real-option,real-pick,real-function,passkey")
    parser.add_argument("--cases", type=int, default=3)
    parser.add_argument("--length", type=int, default=2048)
    parser.add_argument("--layers", default="6,7,8,9,10", help="0-based layers to read")
    parser.add_argument("--point", type=float, default=0.5, help="the question's bar")
    parser.add_argument("--sharp", type=float, default=0.5, help="an edge's bar")
    parser.add_argument("--hops", type=int, default=6)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    model, tokenizer = lazymlx.load(args.model)
    layers = [int(x) for x in args.layers.split(",")]
    captured: dict[int, mx.array] = {}
    layer_of, window_of = prefill._layer, prefill.observed_queries

    def spy(step, layer, carried, forget):
        h, observed = layer_of(step, layer, carried, forget)
        if layer in layers:
            captured[layer] = observed
        return h, observed

    prefill._layer, prefill.observed_queries = spy, lambda *a: 1 << 30  # every row's queries
    try:
        for family in args.families.split(","):
            for seed in range(args.cases):
                links: list[str] = []
                if family == "chain":
                    text, links = chain_prompt(random.Random(seed), tokenizer, args.length)
                    tokens = encode_prompt(tokenizer, text).tolist()
                else:
                    case = make_case(family, tokenizer, args.length, seed, "calibration")
                    tokens = prompt_tokens(tokenizer, case)
                n = len(tokens)
                ids = mx.array(tokens)
                tail = template_tail(tokenizer, ids)
                asked = question_length(tokenizer, ids, tail) or 8
                captured.clear()
                state = LazyState(model)
                prefill.prompt_step(state, ids, lazymlx.LazyConfig())
                spans = token_spans(tokenizer, tokens, links) if links else []
                record = {"family": family, "seed": seed, "tokens": n, "layers": []}
                for layer in layers:
                    keys = state[layer].fetch()[0][:, :, :n]
                    queries = captured[layer]
                    scale = state.adapter.layers[layer].self_attn.scale
                    pairs = edges(queries, keys, scale, min(args.point, args.sharp))
                    question = range(n - tail - asked, n - tail)
                    limit = n - tail - asked - policy.NEAR
                    targets = {
                        target
                        for row, target, share in pairs
                        if row in question and target < limit and share >= args.point
                    }
                    start = {
                        p
                        for t in targets
                        for p in range(max(0, t - policy.AROUND), min(n, t + policy.AROUND + 1))
                    }
                    sharp = [pair for pair in pairs if pair[2] >= args.sharp]
                    sets = grow(start, sharp, args.hops, n)
                    record["layers"].append(
                        {
                            "layer": layer + 1,
                            "edges": len(sharp),
                            "sizes": [len(s) for s in sets],
                            "links_held": [
                                [all(i in s for i in span) for span in spans] for s in sets
                            ],
                        }
                    )
                print(json.dumps(record), flush=True)
                with Path(args.out).open("a") as f:
                    f.write(json.dumps(record) + "\n")
                del state
                mx.clear_cache()
    finally:
        prefill._layer, prefill.observed_queries = layer_of, window_of


if __name__ == "__main__":
    main()
