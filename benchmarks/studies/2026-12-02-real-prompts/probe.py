"""Where each layer's attention puts a prompt's answer: one keep-all prompt step per case (stock's
KV, token for token), the queries of the prompt's last tokens kept at every layer, then per layer
and per way of scoring: the share of the tokens a mass rule keeps (p = 0.8, 0.9, 0.95) and the
share a top-k must keep to hold every token of the gold answer (its best occurrence in the
text). Stock's greedy answer is decoded from the same context.

    .venv/bin/python benchmarks/studies/2026-12-02-real-prompts/probe.py \
        --model qwen2.5-coder-0.5b --length 2048 --families real-option,passkey --seeds 3 \
        --out probe_qwen_2k.jsonl
"""

from __future__ import annotations

import lazymlx  # first: binds OpenBLAS

# isort: split
import argparse
import json
import time
from pathlib import Path

import mlx.core as mx
import numpy as np

from lazymlx.engine import prefill
from lazymlx.engine.cache import LazyState
from lazymlx.engine.decode import forward_step
from lazymlx.engine.templates import generation_tail
from lazymlx.evals.cases import VALIDATION_SEED, make_case

OBSERVED = 384  # queries kept per layer: the question and the template's tail fit in them
POINTING = 64  # the last queries (before the template's tail) whose pointing is kept
REACH = 40  # keys nearer the end than this are no place a window of 8 with a gap of 32 points at
SHARES = (0.8, 0.9, 0.95)
POOL, SINKS = 12, 4


def rendered(tokenizer, case) -> tuple[str, str]:
    """The first prompt's text as the model sees it, and the user's own text inside it."""
    if case.kind == "chat":
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": case.segments[0]}],
            add_generation_prompt=True,
            tokenize=False,
        )
        return text, case.segments[0]
    return case.segments[0], case.segments[0]


def question_start(text: str) -> int:
    marks = ("\n\n", " Question:", " What is the pass key?")
    return max(text.rfind(mark) for mark in marks)


def pooled(scores: np.ndarray, pool: int = POOL) -> np.ndarray:
    padded = np.concatenate([np.full(pool, -np.inf), scores])
    return np.max(np.stack([padded[i : i + scores.size] for i in range(pool + 1)]), axis=0)


def mass_share(scores: np.ndarray, forced: np.ndarray, p: float) -> float:
    free = np.where(forced, 0.0, np.maximum(scores, 0.0))
    held = np.cumsum(np.sort(free)[::-1])
    need = int(np.sum(held < p * held[-1])) + 1
    return need / scores.size


def needed_share(scores: np.ndarray, forced: np.ndarray, spans: list[list[int]]) -> float | None:
    """The least share of the tokens a top-k by `scores` keeps to hold every token of one span."""
    if not spans:
        return None
    ranked = np.where(forced, np.inf, scores)
    order = np.argsort(-ranked, kind="stable")
    rank = np.empty(scores.size, np.int64)
    rank[order] = np.arange(scores.size)
    return min((int(rank[span].max()) + 1) / scores.size for span in spans)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--length", type=int, default=2048)
    parser.add_argument("--families", required=True)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--split", default="calibration")
    parser.add_argument("--out", required=True)
    parser.add_argument("--arrays", help="a folder for each case's score arrays (npz)")
    args = parser.parse_args()
    model, tokenizer = lazymlx.load(args.model)
    tail = len(generation_tail(tokenizer))
    out = Path(args.out)
    done = set()
    if out.exists():
        done = {(r["family"], r["seed"]) for r in map(json.loads, out.read_text().splitlines())}
    first = 0 if args.split == "calibration" else VALIDATION_SEED
    for family in args.families.split(","):
        for seed in range(first, first + args.seeds):
            if (family, seed) in done:
                continue
            case = make_case(family, tokenizer, args.length, seed, args.split)
            if len(case.segments) > 1:
                continue
            text, user = rendered(tokenizer, case)
            chat = case.kind == "chat"
            encoded = tokenizer._tokenizer(
                text, add_special_tokens=not chat, return_offsets_mapping=True
            )
            tokens, offsets = encoded["input_ids"], encoded["offset_mapping"]
            n = len(tokens)
            user_at = text.index(user)
            q_char = user_at + question_start(user)
            q_first = next(i for i, (a, b) in enumerate(offsets) if b > q_char)
            own_tail = tail if chat else 0
            # the gold answer's occurrences in the text before the question, as token spans
            spans = []
            for answer in (case.gold, *case.aliases) if case.gold else ():
                at = text.find(answer, user_at)
                while 0 <= at < q_char:
                    span = [
                        i for i, (a, b) in enumerate(offsets) if a < at + len(answer) and b > at
                    ]
                    spans.append(span)
                    at = text.find(answer, at + 1)
            captured: dict[int, mx.array] = {}
            original = prefill._layer

            def spy(step, layer, carried, forget, original=original, captured=captured):
                h, observed = original(step, layer, carried, forget)
                captured[layer] = observed
                return h, observed

            prefill._layer = spy
            started = time.perf_counter()
            try:
                state = LazyState(model)
                config = lazymlx.LazyConfig(window=OBSERVED, complete="off")
                result = prefill.prompt_step(state, mx.array(tokens), config)
            finally:
                prefill._layer = original
            prompt_s = time.perf_counter() - started
            answer = [int(mx.argmax(result.logits[0, -1]).item())]
            for _ in range(case.max_tokens - 1):
                if answer[-1] in tokenizer.eos_token_ids:
                    break
                logits = forward_step(model, state, mx.array([[answer[-1]]]), config)
                answer.append(int(mx.argmax(logits[0, -1]).item()))
            reply = tokenizer.decode(answer)
            layers = state.adapter.ranking_layers or range(state.num_layers - 1)
            forced = np.zeros(n, bool)
            forced[:SINKS] = True
            forced[-1] = True
            windows = {
                "w8": list(range(n - own_tail - 8, n)),
                "w16": list(range(n - own_tail - 16, n)),
                "w32": list(range(n - own_tail - 32, n)),
                "q": list(range(q_first, n - own_tail)),
                "qt": list(range(q_first, n)),
            }
            rows, arrays = {}, {}
            for layer in layers:
                block = state.adapter.layers[layer]
                keys = state[layer].fetch()[0][:, :, :n].astype(mx.float32)
                queries = captured[layer].astype(mx.float32)
                heads, kv_heads = queries.shape[1], keys.shape[1]
                grouped = queries[0].reshape(kv_heads, heads // kv_heads, OBSERVED, -1)
                logits = (grouped * block.self_attn.scale) @ keys[0].swapaxes(-1, -2)[:, None]
                at = mx.arange(n - OBSERVED, n)
                mask = mx.arange(n)[None] <= at[:, None]
                probs = mx.softmax(mx.where(mask, logits, -mx.inf), axis=-1, precise=True)
                probs = np.array(probs.reshape(heads, OBSERVED, n))
                # where the last queries' heads point: top-4 probabilities and positions among
                # the unforced keys at least REACH before the template's tail (a window and a
                # gap of up to REACH set aside: exact for those, a lower bound past them)
                last = probs[:, -(POINTING + own_tail) :, SINKS : n - own_tail - REACH]
                top = np.argsort(-last, axis=-1)[..., :4]
                arrays[f"top_p{layer}"] = np.take_along_axis(last, top, -1).astype(np.float16)
                arrays[f"top_at{layer}"] = (top + SINKS).astype(np.int32)
                row = {}
                for name, window in windows.items():
                    chosen = np.array(window) - (n - OBSERVED)
                    chosen = chosen[chosen >= 0]
                    per_head = probs[:, chosen].mean(axis=1)  # (heads, n)
                    for reduce_name, scores in (
                        ("mean", per_head.mean(axis=0)),
                        ("max", per_head.max(axis=0)),
                    ):
                        shaped = pooled(scores)
                        key = f"{name}-{reduce_name}"
                        if reduce_name == "mean" and name in ("w8", "w16", "w32", "q"):
                            arrays[f"{key}{layer}"] = scores.astype(np.float32)
                        row[key] = {
                            **{f"m{p}": mass_share(shaped, forced, p) for p in SHARES},
                            "gold": needed_share(shaped, forced, spans),
                        }
                rows[layer] = row
            width = max((len(span) for span in spans), default=1)
            arrays["spans"] = np.array(
                [span + [-1] * (width - len(span)) for span in spans] or [[-1]], np.int32
            )
            if args.arrays:
                folder = Path(args.arrays)
                folder.mkdir(parents=True, exist_ok=True)
                np.savez_compressed(folder / f"{family}_{seed}.npz", **arrays)
            record = {
                "family": family,
                "question_first": q_first,
                "tail": own_tail,
                "seed": seed,
                "kind": case.kind,
                "tokens": n,
                "gold": case.gold,
                "reply": reply,
                "correct": case.correct(reply),
                "question_tokens": n - own_tail - q_first,
                "gold_spans": len(spans),
                "prompt_s": prompt_s,
                "layers": rows,
            }
            with out.open("a") as log:
                log.write(json.dumps(record) + "\n")
            print(
                family,
                seed,
                n,
                repr(reply[:40]),
                case.correct(reply),
                f"{prompt_s:.0f}s",
                flush=True,
            )


if __name__ == "__main__":
    main()
