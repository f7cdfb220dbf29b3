"""Which tokens each cut of a rule keeps, against where a real look-up's answer sits.

Runs one eval case under a rule (a preset name or a rule in calibrate's grammar) with the
prompt step's cuts spied on: per cut, the layer, how many of the step's own tokens reached it
and went on, how many the pointed place forced on, where the question's sharpest queries point
(the text there), and whether every token of the gold answer (its occurrences before the
question) and of the quoted words went on. One JSON line per case.

    .venv/bin/python benchmarks/studies/2026-12-02-pointed-place/trace.py \
        --model qwen2.5-coder-0.5b --families real-pick,real-option --split validation \
        --seeds 1 --length 2048 --rule default --out trace_qwen_2k.jsonl
"""

from __future__ import annotations

import lazymlx  # first: binds OpenBLAS

# isort: split
import argparse
import json
from pathlib import Path

import mlx.core as mx

from lazymlx.engine import model as engine_model
from lazymlx.engine import policy, prefill
from lazymlx.engine.presets import resolve_preset
from lazymlx.engine.templates import question_length, template_tail
from lazymlx.errors import LazymlxError
from lazymlx.evals.cases import VALIDATION_SEED, make_case
from lazymlx.evals.choice import candidate_config
from lazymlx.evals.runner import run_case
from lazymlx.evals.strategies import strategy


def spans_of(text_tokens: list[int], tokenizer, needle: str) -> list[list[int]]:
    """Token index spans of `needle`'s occurrences in the tokens."""
    pieces = [tokenizer.decode([t]) for t in text_tokens]
    starts, at = [], 0
    for piece in pieces:
        starts.append(at)
        at += len(piece)
    text = "".join(pieces)
    found, hit = [], text.find(needle)
    while hit >= 0:
        stop = hit + len(needle)
        found.append([i for i, s in enumerate(starts) if s < stop and s + len(pieces[i]) > hit])
        hit = text.find(needle, hit + 1)
    return found


def _runs(positions: list[int]) -> list[list[int]]:
    """Sorted positions as [first, last] runs."""
    runs: list[list[int]] = []
    for p in positions:
        if runs and p == runs[-1][1] + 1:
            runs[-1][1] = p
        else:
            runs.append([p, p])
    return runs


class Spy:
    """Wraps the engine's prompt step, its cut, the cut's decision and the pointing (module
    attributes, put back by `close`) and notes what each cut of the longest step kept."""

    def __init__(self) -> None:
        self.originals = (
            engine_model.prompt_step,
            prefill.cut_own,
            prefill._cut_here,
            policy.pointing,
        )
        engine_model.prompt_step, prefill.cut_own = self.prompt_step, self.cut_own
        prefill._cut_here, policy.pointing = self.cut_here, self.pointing
        self.reset()

    def reset(self) -> None:
        self.tokens: list[int] | None = None
        self.cuts: list[dict] = []
        self.queries: list[tuple[int, list[float], list[int]]] = []
        self.layer, self.at, self.near = 0, [], None

    def close(self) -> None:
        (engine_model.prompt_step, prefill.cut_own, prefill._cut_here, policy.pointing) = (
            self.originals
        )

    def prompt_step(self, state, tokens, *args, **kwargs):
        if self.tokens is None or tokens.size > len(self.tokens):  # the scored, longest step
            self.tokens, self.cuts, self.queries = tokens.tolist(), [], []
        return self.originals[0](state, tokens, *args, **kwargs)

    def pointing(self, peak, eligible):
        strength, best, rows = self.originals[3](peak, eligible)
        at = [self.at[r] for r in rows.tolist()]
        self.queries.append((self.layer, best.tolist(), at))
        return strength, best, rows

    def cut_here(self, step, layer, firsts, probs, own):
        self.layer, self.at = layer, step.state[layer].row_positions().tolist()
        self.near = self.originals[2](step, layer, firsts, probs, own)
        return self.near

    def cut_own(self, step, layer, ratio, firsts, scores, probs, own, sinks):
        self.near = None
        out = self.originals[1](step, layer, ratio, firsts, scores, probs, own, sinks)
        if out is not None:
            at = step.state[layer].row_positions()[-own:].tolist()
            near = [] if self.near is None else self.near.tolist()
            self.cuts.append(
                {
                    "layer": layer,
                    "own": own,
                    "kept": [at[i] for i in out[0].tolist()],
                    "forced": [p for p, on in zip(at, near, strict=False) if on],
                    "pointing": step.phase.pointing,
                }
            )
        return out


def record_of(case, rule: str, args, outcome, spy: Spy, tokenizer) -> dict:
    """One case's line: the answer, and per cut what went on against the answer's tokens."""
    tokens = spy.tokens or []
    answers = [g for g in (case.gold, *case.aliases) if g]
    gold = [s for g in answers for s in spans_of(tokens, tokenizer, g)]
    user = case.segments[-1]
    quoted = user[user.rfind('"', 0, user.rfind('"')) + 1 : user.rfind('"')]
    quotes = spans_of(tokens, tokenizer, quoted) if quoted else []
    ids = mx.array(tokens)
    tail = template_tail(tokenizer, ids)
    asked = question_length(tokenizer, ids, tail) + tail
    rows = []
    for cut in spy.cuts:
        kept = set(cut["kept"])
        forced = sorted(cut["forced"])
        rows.append(
            {
                "layer": cut["layer"] + 1,
                "own": cut["own"],
                "kept": len(kept),
                "forced": len(forced),
                "forced_at": _runs(forced),
                "forced_text": tokenizer.decode([tokens[i] for i in forced])[:400],
                "pointing": round(cut["pointing"], 3),
                "gold_kept": [all(i in kept for i in s) for s in gold],
                # named as the records have it: the question's positions that did NOT go on
                "question_kept": [
                    p for p in range(len(tokens) - asked, len(tokens)) if p not in kept
                ],
                "quote_kept": [sum(i in kept for i in s) / len(s) for s in quotes],
            }
        )
    return {
        "family": case.family,
        "seed": case.seed,
        "rule": rule,
        "force_share": args.force_share,
        "around": args.around,
        "tokens": len(tokens),
        "gold": case.gold,
        "gold_at": [s[0] for s in gold],
        "quote_at": [s[0] for s in quotes],
        "answer": outcome.text,
        "ttft_s": round(outcome.ttft_s, 2),
        "work": round(outcome.step_fraction, 4),
        "correct": any(g in outcome.text for g in answers),
        "cuts": rows,
        # per candidate layer: each question query's best share of a head's attention on one
        # earlier token, and that token's position
        "queries": [
            {"layer": layer + 1, "best": [round(b, 3) for b in best], "at": at}
            for layer, best, at in spy.queries
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--families", required=True)
    parser.add_argument("--split", default="validation")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--seed", type=int, help="the first seed (default: the split's first)")
    parser.add_argument("--length", type=int, default=2048)
    parser.add_argument("--rule", default="default")
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--force-share",
        type=float,
        default=1.0,
        help="force the places of queries with this share of the rule's point (a probe)",
    )
    parser.add_argument("--around", type=int, default=policy.AROUND)
    args = parser.parse_args()
    model, tokenizer = lazymlx.load(args.model)
    policy.AROUND = args.around
    rows_of = policy.pointed_rows
    policy.pointed_rows = lambda best, rows, threshold, at: rows_of(
        best, rows, threshold * args.force_share, at
    )
    try:
        config = strategy(args.rule, args.model).config
    except LazymlxError:  # a rule in calibrate's grammar
        config = candidate_config(resolve_preset("default", args.model), args.rule)
    first = 0 if args.split == "calibration" else VALIDATION_SEED
    first = first if args.seed is None else args.seed
    spy = Spy()
    try:
        for family in args.families.split(","):
            for seed in range(first, first + args.seeds):
                case = make_case(family, tokenizer, args.length, seed, args.split)
                spy.reset()
                outcome = run_case(model, tokenizer, case, config)
                record = record_of(case, args.rule, args, outcome, spy, tokenizer)
                print(json.dumps(record, indent=1))
                with Path(args.out).open("a") as f:
                    f.write(json.dumps(record) + "\n")
                mx.clear_cache()
    finally:
        spy.close()


if __name__ == "__main__":
    main()
