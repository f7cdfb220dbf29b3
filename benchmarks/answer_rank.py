"""Where in the model can a pruning rule find the answer? The rank of the answer tokens, per layer.

Before any schedule is chosen, this measures what every schedule depends on: run a prompt keep-all,
layer by layer, and at each layer rank the prompt's tokens by a selection rule, then read where the
gold answer's tokens fall. `needed` is the share of the prompt a prune at that layer must keep for
every answer token to survive (1.0: the answer ranks last; 0.001: it is among the very first
picks). A schedule whose first prune at depth d keeps a share r can only keep an answer if
needed(d) <= r, so the curve of needed over depth, across cases, bounds every schedule built on
that rule (later prunes only add risk). Rules: the paper's (last token, head mean), the window
rule (last 8 tokens, span 8: the default's rule when this study chose the default's layers), the
same with span 12 (the default's rule now), and a cumulative one (the window rule's scores
summed over layers so far).

    .venv/bin/python benchmarks/answer_rank.py --lengths 1k,2k,4k --cases 2 \\
        --output benchmarks/results/answer_rank_1k_4k.json
"""

from __future__ import annotations

import lazymlx  # noqa: F401  (binds OpenBLAS before mlx is used)

# isort: split
import argparse
import json

import mlx.core as mx

from lazymlx.bench import header
from lazymlx.blocks import attention_scores
from lazymlx.cache import LazyState
from lazymlx.cli.app import load_model
from lazymlx.evals.runner import CALIBRATION_SEED, make_cases
from lazymlx.evals.tasks import Case, parse_tasks
from lazymlx.generation import encode_prompt
from lazymlx.lengths import parse_lengths
from lazymlx.prefill import PREFILL_CHUNK, _layer, _pooled

WINDOW, POOL = 8, 8
DEFAULT_POOL = 12  # the default's span since this study chose its layers; 1k-4k ran without it


def answer_rows(tokenizer, case: Case, prompt: list[int]) -> list[int]:
    """The prompt rows whose tokens overlap the gold answer's characters."""
    encoded = tokenizer._tokenizer(case.text, return_offsets_mapping=True)
    shift = len(prompt) - len(encoded["input_ids"])  # special tokens encode_prompt adds in front
    assert encoded["input_ids"] == prompt[shift:], "offsets must describe the prompt's tokens"
    start = case.text.index(case.gold)
    end = start + len(case.gold)
    return [
        shift + row
        for row, (a, b) in enumerate(encoded["offset_mapping"])
        if a < end and b > start and b > a
    ]


def needed_share(scores: mx.array, rows: list[int]) -> float:
    """The share of tokens a top-k must keep for every one of `rows` to be in it."""
    order = mx.argsort(-scores)
    rank = mx.zeros(scores.size, mx.int32)
    rank[order] = mx.arange(scores.size, dtype=mx.int32)
    return (max(rank[mx.array(rows)].tolist()) + 1) / scores.size


def layer_ranks(model, prompt: list[int], rows: list[int]) -> dict[str, list[float]]:
    """needed, per rule and layer, from a keep-all run of the prompt."""
    state = LazyState(model)
    adapter, tokens = state.adapter, mx.array(prompt)
    state.aux.extend(tokens, depth=state.num_layers)
    h = adapter.embed(tokens[None])
    positions = mx.arange(tokens.size, dtype=mx.int32)
    seen = positions[-WINDOW:]
    mask = positions[None] <= seen[:, None]
    rules = ("paper", "window 8 + span 8", "window 8 + span 12", "cumulative")
    needed: dict[str, list[float]] = {rule: [] for rule in rules}
    total = mx.zeros(tokens.size)
    for layer, block in enumerate(adapter.layers):
        cache = state[layer]
        h, observed = _layer(state, layer, block, h, positions, 0, PREFILL_CHUNK, False, WINDOW)
        keys, scale = cache.fetch()[0], block.self_attn.scale
        paper = attention_scores(observed[:, :, -1:], keys, scale)
        window = attention_scores(observed, keys, scale, mask)
        total = total + window
        for rule, scores in (
            ("paper", paper),
            ("window 8 + span 8", _pooled(window, POOL)),
            ("window 8 + span 12", _pooled(window, DEFAULT_POOL)),
            ("cumulative", _pooled(total, POOL)),
        ):
            needed[rule].append(needed_share(scores, rows))
        mx.eval(h, total)
    return needed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--tasks", default="passkey,needle,docneedle,docfact,multikey,vartrack")
    parser.add_argument("--lengths", default="1k,2k")
    parser.add_argument("--cases", type=int, default=2, help="cases per task and length")
    parser.add_argument("--first-seed", type=int, default=CALIBRATION_SEED)
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    model, tokenizer = load_model(args.model)
    lengths, tasks = parse_lengths(args.lengths), parse_tasks(args.tasks)
    cases = make_cases(tokenizer, tasks, lengths, args.cases, args.first_seed)
    results = []
    for number, case in enumerate(cases, 1):
        prompt = encode_prompt(tokenizer, case.text).tolist()
        rows = answer_rows(tokenizer, case, prompt)
        needed = layer_ranks(model, prompt, rows)
        results.append(
            {"task": case.task, "length": case.length, "seed": case.seed, "depth": case.depth,
             "prompt_tokens": len(prompt), "answer_rows": rows, "needed": needed}
        )  # fmt: skip
        default_rule = needed["window 8 + span 12"]
        best = min(range(len(default_rule)), key=default_rule.__getitem__)
        print(
            f"[{number}/{len(cases)}] {case.task} {case.length} seed {case.seed}: "
            + " ".join(f"{v:.2f}" for v in default_rule)
            + f"  (best layer {best})",
            flush=True,
        )
        with open(args.output, "w") as f:
            json.dump(
                {"header": header(args.model, cases=args.cases), "cases": results}, f, indent=1
            )


if __name__ == "__main__":
    main()
