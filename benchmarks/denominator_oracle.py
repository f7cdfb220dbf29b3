"""Is it the thinned softmax that moves an answer after a prune? An oracle test, calibration only.

After a prune at layer L, deeper layers attend over the kept rows only: the attention the dropped
tokens held there goes to the kept ones, and the sixteenth study found two-hop answers changed
though every fact went through whole. This runs each case several ways (`--modes`) with every token computed
at every layer (so it is an oracle, not an engine), using the depths the preset's prompt step
gave each token (`depth`: the layers that hold its KV):
- "removed": at a layer at or past its depth, a token is masked out of every query's attention,
  as the engine does. It checks this script: its answer should be the preset's (sparse decode);
- "denominator": such a token keeps its logit in the softmax's denominator but its value is
  zeroed (it adds nothing but weight), the best a stand-in for the dropped tokens' share
  could do if it knew their logits;
- "stale": nothing masked, but past its depth a token's keys and values come from its hidden
  state where it stopped (its Aux slot), projected by each deeper layer: the dropped tokens stay
  in the softmax with keys and values close to their own, at the cost of two projections a
  token and layer instead of the whole block (a late layer changes the residual stream little);
- "kept": nothing masked, keep-all (the baseline's answer; checks the loop once more).
If "denominator" keeps the answers "removed" loses, the lead (a stand-in for the dropped
tokens' share of the denominator in deeper layers) is worth building; if not, it is not.
The same for "stale", a stand-in an engine can compute.

    .venv/bin/python benchmarks/denominator_oracle.py --cases twohop:1k:1,twohop:1k:5 \\
        --lazy sparse --output benchmarks/results/studies/denominator_oracle_1k.json
    .venv/bin/python benchmarks/denominator_oracle.py --summary ORACLE.json \\
        --engine benchmarks/results/studies/doubt_1k.json
"""

from __future__ import annotations

import lazymlx  # noqa: F401  (binds OpenBLAS before mlx is used)

# isort: split
import argparse
import json
import statistics

import mlx.core as mx

from lazymlx.bench import header
from lazymlx.blocks import rope_at
from lazymlx.cache import LazyState
from lazymlx.cli.app import load_model
from lazymlx.evals.baselines import BaselineCache
from lazymlx.evals.families import make_case, parse_families
from lazymlx.evals.scoring import bootstrap_interval, common_prefix
from lazymlx.generation import encode_prompt
from lazymlx.lengths import parse_lengths
from lazymlx.prefill import prompt_step
from lazymlx.presets import resolve_preset
from lazymlx.segments import segment_ends

MODES = ("removed", "denominator", "stale", "kept")


def oracle_generate(model, prompt: list[int], depth: mx.array, mode: str, max_tokens: int):
    """Greedy tokens with every token through every layer, a row's attention at layers past its
    depth removed, reduced to its denominator share, taken from its stopped state, or kept, by
    `mode`."""
    state = LazyState(model)  # only for its adapter
    adapter = state.adapter
    keys: list[mx.array | None] = [None] * len(adapter.layers)
    values: list[mx.array | None] = [None] * len(adapter.layers)
    depths = depth.astype(mx.int32)
    tokens, out = mx.array(prompt), []
    start = 0
    stopped = None  # per prompt row: the hidden state entering the layer it stopped at
    for _ in range(max_tokens):
        count = tokens.size
        positions = mx.arange(start, start + count, dtype=mx.int32)
        h = adapter.embed(tokens[None])
        for layer, block in enumerate(adapter.layers):
            attn = block.self_attn
            source = h
            if mode == "stale" and start == 0:  # the prompt's rows: decode tokens never stop
                stops = (depths[:count] == layer)[None, :, None]
                stopped = mx.where(stops, h, h if stopped is None else stopped)
                source = mx.where((depths[:count] > layer)[None, :, None], h, stopped)
            q, k, v = adapter.queries_keys_values(attn, block.input_layernorm(source))
            q, k = rope_at(attn.rope, q, positions, start), rope_at(attn.rope, k, positions, start)
            keys[layer] = k if keys[layer] is None else mx.concatenate([keys[layer], k], axis=2)
            values[layer] = v if values[layer] is None else mx.concatenate([values[layer], v], 2)
            rows = keys[layer].shape[2]
            here = depths[:rows] > layer  # rows that hold KV at this layer in the engine
            vals = values[layer]
            causal = mx.arange(rows)[None] <= positions[:, None]
            allowed = causal
            if mode == "removed":
                allowed = causal & (here[None] | (mx.arange(rows)[None] == positions[:, None]))
            elif mode == "denominator":
                vals = vals * here[None, None, :, None].astype(vals.dtype)
            heads, kv = q.shape[1], keys[layer].shape[1]
            grouped = q[0].reshape(kv, heads // kv, count, -1).astype(mx.float32)
            logits = (grouped * attn.scale) @ keys[layer][0].astype(mx.float32).swapaxes(-1, -2)[
                :, None
            ]
            logits = mx.where(allowed, logits, -mx.inf)
            probs = mx.softmax(logits, axis=-1, precise=True)
            mixed = probs @ vals[0].astype(mx.float32)[:, None]  # (kv, group, count, dim)
            mixed = mixed.reshape(heads, count, -1)[None].astype(h.dtype)
            h = h + attn.o_proj(mixed.transpose(0, 2, 1, 3).reshape(1, count, -1))
            h = h + block.mlp(block.post_attention_layernorm(h))
            mx.eval(h, keys[layer], values[layer])
        token = int(mx.argmax(adapter.logits(h[:, -1:])[0, -1]).item())
        out.append(token)
        depths = mx.concatenate([depths, mx.array([len(adapter.layers)], mx.int32)])
        start += count
        tokens = mx.array([token])
    return out


def engine_agreement(run: dict) -> int:
    """The leading tokens the engine's answer shares with stock's: up to where it parts, else
    all of them (a free-form answer is 32 tokens)."""
    return len(run["leads"]) if run["parts_at"] is None else run["parts_at"]


def summarise(path: str, engine: list[str]) -> None:
    """Each mode against the engine's own run of the same cases (`doubt.py`'s output): stock's
    right answers kept, and the leading tokens agreeing with stock's on free-form cases, with a
    bootstrap 95% interval of the mean paired difference (mode minus engine)."""
    with open(path) as f:
        cases = json.load(f)["cases"]
    ran = {}
    for run in engine:
        with open(run) as f:
            ran |= {(c["family"], c["length"], c["seed"]): c for c in json.load(f)["cases"]}
    modes = [m for m in MODES if m in cases[0]]
    right = [c for c in cases if c.get("stock", {}).get("correct")]
    free = [c for c in cases if c["gold"] is None]
    for mode in modes:
        kept = sum(c[mode]["correct"] for c in right)
        print(f"{mode}: {kept} of {len(right)} right answers kept", end="")
        if free:
            agreed = [c[mode]["agreed"] for c in free]
            engine_agreed = [
                engine_agreement(ran[c["family"], c["length"], c["seed"]]) for c in free
            ]
            differences = [[m - e for m, e in zip(agreed, engine_agreed, strict=True)]]
            low, high = bootstrap_interval(differences)  # one stratum of paired differences
            print(
                f"; free-form: {statistics.mean(agreed):.1f} tokens agree, the "
                f"engine {statistics.mean(engine_agreed):.1f}, difference "
                f"{statistics.mean(differences[0]):+.1f} (95% CI {low:+.1f} to {high:+.1f})",
                end="",
            )
        print()
    print(f"the engine: {sum(ran[c['family'], c['length'], c['seed']]['kept'] for c in right)} "
          f"of {len(right)} right answers kept")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--cases", help="family:length:seed,...")
    parser.add_argument("--lazy", default="sparse")
    parser.add_argument(
        "--modes", default="removed,denominator,kept", help=f"some of {', '.join(MODES)}"
    )
    parser.add_argument("--output")
    parser.add_argument("--summary", help="an oracle output to compare with --engine; run nothing")
    parser.add_argument("--engine", nargs="+", help="doubt.py's runs of the same cases")
    args = parser.parse_args()
    if args.summary:
        if not args.engine:
            parser.error("--summary needs --engine: doubt.py's outputs for the same cases")
        summarise(args.summary, args.engine)
        return
    unknown = set(args.modes.split(",")) - set(MODES)
    if unknown or not args.cases or not args.output:
        parser.error(f"give --cases, --output and --modes from {', '.join(MODES)}")
    model, tokenizer = load_model(args.model)
    config = resolve_preset(args.lazy, args.model)
    baselines = BaselineCache(model)
    results = []
    for spec in args.cases.split(","):
        family, length, seed = spec.split(":")
        family, length, seed = parse_families(family)[0], parse_lengths(length)[0], int(seed)
        case = make_case(family, tokenizer, length, seed, "calibration")
        if case.kind != "raw":
            raise SystemExit(f"error: {spec} is a {case.kind} case; the oracle runs raw prompts")
        prompt = encode_prompt(tokenizer, case.segments[0]).tolist()
        state = LazyState(model)
        prompt_step(state, mx.array(prompt), config, ends=segment_ends(tokenizer), prune=True)
        depth = state.aux.depths()
        row = {"family": family, "length": length, "seed": seed, "gold": case.gold}
        stock = baselines.get(case)  # the leading tokens each mode shares with it, where cached
        if stock is not None:
            row["stock"] = {"text": stock.text, "correct": case.correct(stock.text)}
        for mode in args.modes.split(","):
            tokens = oracle_generate(model, prompt, depth, mode, case.max_tokens)
            text = tokenizer.decode(tokens)
            agreed = None if stock is None else common_prefix(tokens, stock.tokens)
            row[mode] = {"text": text, "correct": case.correct(text), "agreed": agreed}
            print(f"{spec} {mode}: {case.correct(text)}, {agreed} agree {text!r}", flush=True)
        results.append(row)
        with open(args.output, "w") as f:
            json.dump({"header": header(args.model, lazy=args.lazy), "cases": results}, f, indent=1)


if __name__ == "__main__":
    main()
