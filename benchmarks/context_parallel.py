"""Context parallelism (lazymlx/context_parallel.py) measured, and its TTFT modelled.

Three jobs:

    # the keep masks of one real one-process prompt step (the passkey prompt), for `model`
    .venv/bin/python benchmarks/context_parallel.py masks -m qwen2.5-coder-0.5b -l 8k \\
        --output benchmarks/results/cp_masks_qwen_8k.json

    # a real chain against one process: same tokens and kept rows, TTFT (wall clock on this
    # machine), and each rank's bytes and messages per layer against the formula and against
    # tensor parallelism's at the same length
    .venv/bin/python benchmarks/context_parallel.py chain -m smollm2-135m -l 2k --ranks 2,3 \\
        --output benchmarks/results/cp_chain_smollm2_2k.json

    # the critical-path TTFT model: block times measured here in one process, fitted as
    # c0 + c_tok·queries + c_pair·(query, key) pairs, replayed through the chain per (slice,
    # layer) with the real keep masks (from `masks`), the messages' sizes and a link's latency
    # and bandwidth; beside it tensor parallelism's and one process's, all from the same fit
    .venv/bin/python benchmarks/context_parallel.py model -m qwen2.5-coder-0.5b \\
        --masks benchmarks/results/cp_masks_qwen_8k.json --lengths 8k,32k --ranks 2,3,4 \\
        --output benchmarks/results/cp_model_qwen.json

The model is a model: it says what the chain's schedule costs given those times, not what a
group of Macs measures. The chain here keeps no compute in flight while a message passes (a
rank receives, computes its slice, forwards), and so does the model.
"""

from __future__ import annotations

import lazymlx  # first: it binds OpenBLAS, which only works before anything imports MLX

# isort: split
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import mlx.core as mx
import numpy as np

from lazymlx import LazyState, context_parallel, distributed
from lazymlx.context_parallel import partition, weighted_costs
from lazymlx.engine.blocks import attention_mask, block_forward
from lazymlx.engine.cache import LazyKVCache
from lazymlx.engine.prefill import prompt_step
from lazymlx.engine.presets import resolve_preset
from lazymlx.evals.bench import bench_prompt
from lazymlx.lengths import parse_lengths

LATENCY_S = 100e-6  # per message (Thunderbolt/Ethernet TCP, the issue's figure)
BANDWIDTH = 8e9  # bytes per second


# masks: one real prompt step


def masks(args: argparse.Namespace) -> None:
    model, tokenizer = lazymlx.load(args.model)
    (length,) = parse_lengths(args.lengths)
    prompt = bench_prompt(tokenizer, "passkey", length).tokens
    config = resolve_preset(args.lazy, args.model)
    state = LazyState(model)
    state.record = []
    started = time.perf_counter()
    prompt_step(state, mx.array(prompt), config)
    seconds = time.perf_counter() - started
    carried = [positions for _, positions in state.record]
    out = {"model": args.model, "lazy": args.lazy, "tokens": len(prompt), "seconds": seconds}
    out["carried"] = carried
    Path(args.output).write_text(json.dumps(out))
    print(f"{len(prompt)} tokens, {seconds:.1f} s, kept at the last layer: {len(carried[-1])}")


# chain: real ranks


def chain_rank(args: argparse.Namespace) -> None:
    """One rank (under mlx.launch) or one process: generate twice (a warm-up, then timed);
    rank 0 writes what it kept and its TTFT, every rank what it sent in the timed step."""
    joined = distributed.join() if "MLX_RANK" in os.environ else None
    if joined is not None:
        from lazymlx import collectives

        collectives.set_group(None)
        context_parallel.join(joined)
    chain = context_parallel.chain()
    model, tokenizer = lazymlx.load(args.model)
    out = Path(args.out)
    if chain is not None and not chain.leads:
        context_parallel.follow(model)
        sent = {"messages": chain.traffic.messages, "times": chain.times}
        (out / f"rank{chain.rank}.json").write_text(json.dumps(sent))
        return
    prompt = bench_prompt(tokenizer, "passkey", parse_lengths(args.lengths)[0]).tokens
    config = resolve_preset(args.lazy, args.model)
    with context_parallel.lead():
        for _ in range(2):
            state = LazyState(model)
            state.record = []
            responses = list(
                lazymlx.stream_generate(
                    model, tokenizer, prompt, args.gen_len, lazy=config, prompt_cache=state
                )
            )
    result = {
        "tokens": [r.token for r in responses],
        "ttft_s": responses[0].ttft_s,
        "carried": [positions for _, positions in state.record[: state.num_layers]],
        "depths": np.array(state.aux.depths()).tolist(),
    }
    if chain is not None:
        plan = chain.plan
        result |= {"messages": chain.traffic.messages, "times": chain.times}
        result |= {"bounds": plan.bounds, "window": plan.window, "decisions": plan.decisions}
    (out / "rank0.json").write_text(json.dumps(result))


def expected_bytes(
    adapter, carried: list[list[int]], bounds: list[int], window: int, decisions: list[int]
) -> dict[int, list[tuple[int, int]]]:
    """rank → per layer (messages, bytes) the chain's protocol sends, from the kept rows."""
    ranks, row = len(bounds) - 1, 2 * adapter.num_kv_heads * adapter.head_dim * 4 + 4
    out = {}
    for p in range(ranks):
        rank, per_layer = (p + 1) % ranks, []
        for layer, positions in enumerate(carried):
            at = np.array(positions)
            messages, size = 0, 0
            rows = int((at < bounds[p + 1]).sum())
            if rank != 0 and rows:
                messages, size = 2, rows * row
                if layer in decisions:
                    messages += 1
                    size += adapter.num_heads * min(window, rows) * adapter.head_dim * 4
            if layer in decisions and (rank + 1) % ranks != 0:  # the keep mask, forwarded
                messages, size = messages + 1, size + at.size
            per_layer.append((messages, size))
        out[rank] = per_layer
    return out


def chain(args: argparse.Namespace) -> None:
    """One process, then each group size; the table of what matched and what was sent."""
    here = Path(args.output).with_suffix("")
    here.mkdir(parents=True, exist_ok=True)
    script = [sys.executable, __file__, "chain-rank", "-m", args.model, "-l", args.lengths]
    script += ["--lazy", args.lazy, "--gen-len", str(args.gen_len)]
    runs = {}
    for ranks in [1, *map(int, args.ranks.split(","))]:
        out = here / f"ranks{ranks}"
        out.mkdir(exist_ok=True)
        launch = [sys.executable.replace("python", "mlx.launch"), "-n", str(ranks)]
        launch += ["--backend", "ring", "--starting-port", str(distributed.free_ports(ranks))]
        command = [*script, "--out", str(out)]
        if ranks > 1:
            command = [*launch, "--python", sys.executable, *command[1:]]
        subprocess.run(command, check=True, timeout=3600)
        runs[ranks] = {
            r: json.loads((out / f"rank{r}.json").read_text()) for r in range(max(ranks, 1))
        }
    model, _ = lazymlx.load(args.model)
    adapter = LazyState(model).adapter
    alone = runs[1][0]
    table = {"model": args.model, "lazy": args.lazy, "tokens": len(alone["depths"])}
    table["one_process_ttft_s"] = alone["ttft_s"]
    for ranks, ranked in runs.items():
        if ranks == 1:
            continue
        lead = ranked[0]
        same = lead["tokens"] == alone["tokens"] and lead["carried"] == alone["carried"]
        expected = expected_bytes(
            adapter, lead["carried"], lead["bounds"], lead["window"], lead["decisions"]
        )
        rows = []
        for rank, sent in ranked.items():
            per_layer = {}
            for layer, _, size in sent["messages"]:
                if layer >= 0:
                    count, total = per_layer.get(layer, (0, 0))
                    per_layer[layer] = (count + 1, total + size)
            measured = [per_layer.get(layer, (0, 0)) for layer in range(len(lead["carried"]))]
            rows.append(
                {
                    "rank": rank,
                    "bytes": sum(b for _, b in measured),
                    "messages": sum(m for m, _ in measured),
                    "equals_formula": measured == [tuple(x) for x in expected[rank]],
                    "gather_bytes": sum(s for layer, w, s in sent["messages"] if w != "header"
                                        and layer < 0),
                }
            )  # fmt: skip
        # tensor parallelism: two all_sums of (tokens reaching the layer × hidden) fp32 per rank
        tp = sum(2 * len(p) * adapter.hidden_size * 4 for p in lead["carried"])
        table[f"ranks{ranks}"] = {
            "same_tokens_and_kept_rows": same,
            "ttft_s": lead["ttft_s"],
            "bounds": lead["bounds"],
            "per_rank": rows,
            "tensor_parallel_bytes_per_rank": tp,
            "chain_max_rank_bytes_vs_tp": max(r["bytes"] for r in rows) / tp,
            "chain_total_bytes_vs_tp_total": sum(r["bytes"] for r in rows) / (tp * ranks),
        }
    Path(args.output).write_text(json.dumps(table, indent=1))
    print(json.dumps(table, indent=1))


# model: the critical path, replayed


def fit_block(model, repeats: int = 3) -> tuple[float, float, float]:
    """(c0, c_tok, c_pair): one block timed for q queries after k earlier rows, fitted by least
    squares as c0 + c_tok·q + c_pair·(q·k + q(q+1)/2), the median of `repeats` each."""
    state = LazyState(model)
    adapter, block = state.adapter, state.adapter.layers[0]
    x = mx.random.normal((1, 2560, adapter.hidden_size)).astype(state.dtype)
    mx.eval(x)
    rows, times = [], []
    for q in (128, 512):
        for k in (0, 512, 2048):
            runs = []
            for _ in range(repeats):
                cache = LazyKVCache()
                if k:
                    block_forward(adapter, block, cache, x[:, :k], mx.arange(k), 0, "causal")
                    mx.eval(cache.keys, cache.values)
                at = mx.arange(k, k + q, dtype=mx.int32)
                started = time.perf_counter()
                out, _ = block_forward(
                    adapter, block, cache, x[:, k : k + q], at, k, attention_mask(cache, at, None)
                )
                mx.eval(out)
                runs.append(time.perf_counter() - started)
            rows.append([1.0, q, q * k + q * (q + 1) / 2])
            times.append(sorted(runs)[len(runs) // 2])
    c0, c_tok, c_pair = np.linalg.lstsq(np.array(rows), np.array(times), rcond=None)[0]
    return max(c0, 0.0), max(c_tok, 0.0), max(c_pair, 0.0)


def spread_masks(config, tokens: int, layers: int) -> list[np.ndarray]:
    """Carried positions per layer as the schedule thins them, the kept tokens spread evenly
    (the sinks and the last token always kept): a stand-in where no real run was affordable."""
    keep, present = config.pruning_layers(layers), np.arange(tokens)
    least = min(tokens, config.keep_first + 1)
    out = []
    for layer in range(layers):
        out.append(present)
        if layer in keep and layer < layers - 1:
            count = max(config.kept_count(keep[layer], present.size), least)
            if count < present.size:
                pick = np.linspace(0, present.size - 1, count).round().astype(int)
                present = np.union1d(present[pick], present[: config.keep_first])[-count:]
                present[-1] = tokens - 1
    return out


def replay_chain(carried, bounds, cost, adapter, decisions, window) -> float:
    """The time rank 0 has its logits and every Aux slot: each rank receives a layer's rows,
    computes its slice, forwards; at a pruning layer the mask goes back along the ring."""
    ranks, row = len(bounds) - 1, 2 * adapter.num_kv_heads * adapter.head_dim * 4 + 4

    def message(size: int) -> float:
        return LATENCY_S + size / BANDWIDTH if size else 0.0

    ready = [0.0] * ranks
    for layer, positions in enumerate(carried):
        at = np.asarray(positions)
        sent = 0.0
        for p in range(ranks):
            own = int(((at >= bounds[p]) & (at < bounds[p + 1])).sum())
            earlier = int((at < bounds[p]).sum())
            compute = cost(own, earlier) if own else 0.0
            start = max(ready[p], sent) if p else ready[p]
            ready[p] = start + compute
            if p < ranks - 1:
                size = (earlier + own) * row
                if layer in decisions:
                    size += adapter.num_heads * min(window, earlier + own) * adapter.head_dim * 4
                sent = ready[p] + message(size)
                ready[p] = sent  # the send blocks until the bytes have passed
        if layer in decisions:
            for p in range(ranks - 1):
                ready[p] = max(ready[p], ready[-1] + (p + 1) * message(at.size))
    last = set(np.asarray(carried[-1]).tolist())
    gone = [i for i in range(bounds[-1]) if i not in last]
    gathered = 0.0
    for p in range(ranks - 1):
        slots = sum(1 for i in gone if i < bounds[p + 1])
        gathered = max(gathered, ready[p]) + message(slots * adapter.hidden_size * 4)
    return max(ready[-1], gathered)


def replay_tensor(carried, cost, adapter, ranks: int) -> float:
    """Tensor parallelism: each layer's compute split evenly, plus two ring all-reduces of the
    layer's (tokens × hidden) fp32 activations."""
    total = 0.0
    for positions in carried:
        tokens = len(positions)
        size = tokens * adapter.hidden_size * 4
        reduce = 2 * (ranks - 1) * LATENCY_S + 2 * (ranks - 1) / ranks * size / BANDWIDTH
        total += cost(tokens, 0) / ranks + 2 * reduce
    return total


def ttft_model(args: argparse.Namespace) -> None:
    model, _ = lazymlx.load(args.model)
    adapter = LazyState(model).adapter
    layers, config = len(adapter.layers), resolve_preset(args.lazy, args.model)
    c0, c_tok, c_pair = fit_block(model)

    def cost(queries: int, earlier: int) -> float:
        return c0 + c_tok * queries + c_pair * (queries * earlier + queries * (queries + 1) / 2)

    real = json.loads(Path(args.masks).read_text()) if args.masks else None
    table = {"model": args.model, "lazy": args.lazy, "fit": [c0, c_tok, c_pair], "rows": []}
    table["link"] = {"latency_s": LATENCY_S, "bytes_per_s": BANDWIDTH}
    deepest = layers - 1
    for length in parse_lengths(args.lengths):
        whole = [np.arange(length)] * layers
        if real is not None and real["tokens"] == length:
            pruned, masks_from = [np.array(p) for p in real["carried"]], "real"
        else:
            pruned, masks_from = spread_masks(config, length, layers), "spread"
        decisions = sorted(x for x in config.pruning_layers(layers) if x < deepest)
        one = {"off": sum(cost(len(p), 0) for p in whole)}
        one["pruned"] = sum(cost(len(p), 0) for p in pruned)
        for ranks in map(int, args.ranks.split(",")):
            row = {"tokens": length, "ranks": ranks, "masks": masks_from, **one}
            for name, carried, deciding in (("off", whole, []), ("pruned", pruned, decisions)):
                token, pair = c_tok, c_pair
                if deciding:
                    token, pair = weighted_costs(config, layers, c_tok, c_pair)
                bounds = partition(length, ranks, token, pair)
                row[f"chain_{name}"] = replay_chain(
                    carried, bounds, cost, adapter, deciding, config.window
                )
                row[f"tensor_{name}"] = replay_tensor(carried, cost, adapter, ranks)
            row["chain_pruned_vs_one_pruned"] = row["chain_pruned"] / one["pruned"]
            table["rows"].append(row)
            print(
                f"{length:>6} tokens, {ranks} ranks ({masks_from} masks): one process "
                f"{one['off']:.2f} s / pruned {one['pruned']:.2f} s; chain {row['chain_off']:.2f}"
                f" / {row['chain_pruned']:.2f} s ({row['chain_pruned_vs_one_pruned']:.2f}x the "
                f"pruned one); tensor {row['tensor_off']:.2f} / {row['tensor_pruned']:.2f} s"
            )
    Path(args.output).write_text(json.dumps(table, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("job", choices=["masks", "chain", "chain-rank", "model"])
    parser.add_argument("-m", "--model", default="smollm2-135m")
    parser.add_argument("-l", "--lengths", default="2k")
    parser.add_argument("--lazy", default="default")
    parser.add_argument("--output", default=None)
    parser.add_argument("--out", default=None)
    parser.add_argument("--gen-len", type=int, default=8)
    parser.add_argument("--ranks", default="2")
    parser.add_argument("--masks", default=None)
    args = parser.parse_args()
    {"masks": masks, "chain": chain, "chain-rank": chain_rank, "model": ttft_model}[args.job](args)


if __name__ == "__main__":
    main()
