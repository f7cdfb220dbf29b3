"""Why a preset loses an answer: where each planted fact's tokens stop, and how each layer ranks them.

For each raw case, two runs of the prompt alone:
- the preset's lazy prompt step: every token's depth (the layers it went through); for each
  planted piece (the asked fact first, then look-alikes, distractors) the depth of each of its
  tokens, so a fact whose key stopped at layer 7 while its value went on shows as such, and
  the depths of the prompt's last tokens (its question, which the scoring observes);
- a keep-all pass that ranks the prompt's tokens at every layer by the preset's rule: the share a
  prune at that layer must keep for a piece's every token to survive (1.0: it ranks last);
- stock mlx-lm's greedy answer and its margin: at each step until the gold has been written,
  how far (in log-probability) its token led the runner-up, and the closest step, since an
  answer stock itself nearly did not give can flip under any change to the context.
For each chat case, the conversation as the eval runs it, stock mlx-lm and the preset side by
side: every turn's two replies, and after each turn the depths of each planted piece's tokens
(a later turn revives, so they can change), since a reply that parts from stock's changes the
history every later turn sees.
Calibration cases only: this chooses knobs.

    .venv/bin/python benchmarks/diagnose.py --families lookalike,passkey --lengths 2k \\
        --seeds 0,1,2 --lazy default --output benchmarks/results/diagnose_lookalike_2k.json
    .venv/bin/python benchmarks/diagnose.py --cases table:1k:2,twohop:1k:1 --lazy default \\
        --output benchmarks/results/studies/diagnose_default.json
    .venv/bin/python benchmarks/diagnose.py --cases chat:1k:2,chat:1k:9 --lazy default \\
        --output benchmarks/results/studies/diagnose_chat_1k.json
    .venv/bin/python benchmarks/diagnose.py --cases twohop:1k:32 --output ... \\
        --config "twenty-third/0.2@67%, revive, past template, segments 16 (0.74)"
"""

from __future__ import annotations

import lazymlx  # noqa: F401  (binds OpenBLAS before mlx is used)

# isort: split
import argparse
import json
from collections.abc import Iterator
from typing import Any

import mlx.core as mx
from study import STUDIES

from lazymlx.bench import header
from lazymlx.cache import LazyState
from lazymlx.cli.app import load_model
from lazymlx.evals.families import Case, make_case, parse_families
from lazymlx.evals.runner import send_turn
from lazymlx.generation import encode_prompt, stream_generate
from lazymlx.lengths import parse_lengths
from lazymlx.prefill import PREFILL_CHUNK, Ranker, _layer, prompt_step
from lazymlx.presets import resolve_preset
from lazymlx.segments import segment_ends
from lazymlx.session import ChatSession

TAIL = 24  # the prompt's last tokens (its question) whose depths are reported too


def piece_rows(
    tokenizer, case: Case, prompt: list[int], text: str | None = None
) -> list[list[int]]:
    """The prompt rows of each planted piece's tokens; text: what `prompt` encodes (the first
    segment, or a chat turn as its template renders it)."""
    text = case.segments[0] if text is None else text
    encoded = tokenizer._tokenizer(text, return_offsets_mapping=True)
    shift = len(prompt) - len(encoded["input_ids"])  # special tokens encode_prompt adds in front
    rows = []
    for piece in case.planted:
        start = text.index(piece)
        end = start + len(piece)
        rows.append(
            [
                shift + row
                for row, (a, b) in enumerate(encoded["offset_mapping"])
                if a < end and b > start and b > a
            ]
        )
    return rows


def needed_share(scores: mx.array, rows: list[int]) -> float:
    order = mx.argsort(-scores)
    rank = mx.zeros(scores.size, mx.int32)
    rank[order] = mx.arange(scores.size, dtype=mx.int32)
    return (max(rank[mx.array(rows)].tolist()) + 1) / scores.size


def keep_all_layers(model, config, prompt: list[int]) -> Iterator[tuple[int, Any, Any, mx.array]]:
    """A keep-all pass, a layer at a time: (layer, block, its cache, the queries of the last
    `config.window` tokens, which a prune there would rank by)."""
    state = LazyState(model)
    adapter, tokens = state.adapter, mx.array(prompt)
    state.aux.extend(tokens, depth=state.num_layers)
    h = adapter.embed(tokens[None])
    positions = mx.arange(tokens.size, dtype=mx.int32)
    for layer, block in enumerate(adapter.layers):
        h, observed = _layer(
            state, layer, block, h, positions, 0, 0, PREFILL_CHUNK, False, config.window
        )
        yield layer, block, state[layer], observed
        mx.eval(h)


def keep_all_ranks(model, tokenizer, config, prompt: list[int], pieces: list[list[int]]):
    """Per layer, per piece: the share of the prompt a prune there must keep to keep it whole."""
    ranker, tokens = Ranker(config, 0, segment_ends(tokenizer)), mx.array(prompt)
    shares = []
    for layer, block, cache, observed in keep_all_layers(model, config, prompt):
        scores = ranker.shape(ranker.rows(observed, cache, block.self_attn.scale, layer), tokens)
        shares.append([round(needed_share(scores, rows), 3) for rows in pieces])
    return shares


def stock_margin(model, tokenizer, case: Case, prompt: list[int]) -> dict:
    """Stock's greedy answer, and its closest step before the gold is written: the lead of its
    token over the runner-up, in log-probability."""
    text, steps = "", []
    for response in stream_generate(model, tokenizer, prompt, case.max_tokens):
        ranked = mx.argsort(-response.logprobs)[:2].tolist()
        lead = (response.logprobs[ranked[0]] - response.logprobs[ranked[1]]).item()
        steps.append((round(lead, 3), tokenizer.decode([ranked[0]]), tokenizer.decode([ranked[1]])))
        text += response.text
        if case.gold in text:
            break
    closest = min(steps)
    return {"text": text, "right": case.correct(text), "min_lead": closest[0],
            "token": closest[1], "runner_up": closest[2], "leads": [lead for lead, *_ in steps]}  # fmt: skip


def chat_result(model, tokenizer, case: Case, config) -> dict:
    """A chat case turn by turn as the eval's runner sends it (`send_turn`), stock and the preset
    side by side: per turn both replies, and the depths of the planted pieces' tokens after it."""
    first = [{"role": "user", "content": case.segments[0]}]
    text = tokenizer.apply_chat_template(first, add_generation_prompt=True, tokenize=False)
    prompt = list(tokenizer.apply_chat_template(first, add_generation_prompt=True))
    pieces = piece_rows(tokenizer, case, prompt, text)
    sessions = {
        mode: ChatSession(model, tokenizer, lazy=lazy)
        for mode, lazy in (("baseline", None), ("lazy", config))
    }
    turns = []
    for turn in range(len(case.segments)):
        replies = {
            mode: "".join(response.text for response in send_turn(session, case, turn))
            for mode, session in sessions.items()
        }
        depth = sessions["lazy"].context.cache.aux.depths().tolist()
        turns.append({"replies": replies, "depths": [[depth[r] for r in rows] for rows in pieces]})
    return {
        "kind": "chat",
        "pieces": [
            {"text": piece, "holds_gold": case.gold in piece,
             "tokens": [tokenizer.decode([prompt[r]]) for r in rows]}
            for piece, rows in zip(case.planted, pieces, strict=True)
        ],
        "turns": turns,
    }  # fmt: skip


def chosen_cases(args) -> list[tuple[str, int, int]]:
    """(family, length, seed) of every case to diagnose."""
    if args.cases:
        picked = []
        for spec in args.cases.split(","):
            family, length, seed = spec.split(":")
            picked.append((parse_families(family)[0], parse_lengths(length)[0], int(seed)))
        return picked
    return [
        (family, length, int(seed))
        for length in parse_lengths(args.lengths)
        for family in parse_families(args.families)
        for seed in args.seeds.split(",")
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--families", default="lookalike,passkey")
    parser.add_argument("--lengths", default="2k")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument(
        "--cases", help="family:length:seed,... (instead of families x lengths x seeds)"
    )
    parser.add_argument("--lazy", default="default")
    parser.add_argument(
        "--config", help="a study's config instead of a preset: STUDY/NAME, as study.py names them"
    )
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    if args.config:
        study, _, name = args.config.partition("/")
        if name not in STUDIES.get(study, {}):
            parser.error(f"no config {args.config!r}; write STUDY/NAME as study.py names them")
        config = STUDIES[study][name]
    else:
        config = resolve_preset(args.lazy, args.model)
    model, tokenizer = load_model(args.model)
    results = []
    for family, length, seed in chosen_cases(args):
        case = make_case(family, tokenizer, length, seed, "calibration")
        if case.kind == "chat" and case.planted:
            result = chat_result(model, tokenizer, case, config)
            named = {"family": family, "length": length, "seed": seed, "gold": case.gold}
            results.append(named | result)
            for number, turn in enumerate(result["turns"], 1):
                print(f"{family} {length} #{seed} turn {number}: {turn}", flush=True)
            write(args, results)
            continue
        if case.kind != "raw" or not case.planted:
            continue
        prompt = encode_prompt(tokenizer, case.segments[0]).tolist()
        pieces = piece_rows(tokenizer, case, prompt)
        state = LazyState(model)
        prompt_step(state, mx.array(prompt), config, ends=segment_ends(tokenizer), prune=True)
        depth = state.aux.depths().tolist()
        results.append(
            {
                "family": family, "length": length, "seed": seed, "gold": case.gold,
                "pieces": [
                    {"text": piece, "holds_gold": case.gold in piece,
                     "tokens": [tokenizer.decode([prompt[r]]) for r in rows],
                     "depths": [depth[r] for r in rows]}
                    for piece, rows in zip(case.planted, pieces, strict=True)
                ],
                "tail": [[tokenizer.decode([t]), d]
                         for t, d in zip(prompt[-TAIL:], depth[-TAIL:], strict=True)],
                "needed": keep_all_ranks(model, tokenizer, config, prompt, pieces),
                "stock": stock_margin(model, tokenizer, case, prompt),
            }
        )  # fmt: skip
        asked, stock = results[-1]["pieces"][0], results[-1]["stock"]
        print(
            f"{family} {length} #{seed}: asked fact depths {asked['depths']}; stock's closest "
            f"lead {stock['min_lead']} ({stock['token']!r} over {stock['runner_up']!r})",
            flush=True,
        )
        write(args, results)


def write(args, results: list[dict]) -> None:
    settings = {"lazy": args.config or args.lazy}  # what ran: a study's config, or a preset
    with open(args.output, "w") as f:
        json.dump({"header": header(args.model, **settings), "cases": results}, f, indent=1)


if __name__ == "__main__":
    main()
