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
    # c0 + c_tok·queries + c_pair·(query, key) pairs (with the projection and rank 0's ranking
    # timed apart), replayed through the chain per (slice, layer) with the real keep masks
    # (from `masks`; at other lengths spread evenly, and the real ones stretched), the
    # messages' sizes and a link's latency and bandwidth; beside it the chain without the
    # overlap, tensor parallelism's and one process's, all from the same fit
    .venv/bin/python benchmarks/context_parallel.py model -m qwen2.5-coder-0.5b \\
        --masks benchmarks/results/cp_masks_qwen_8k.json --lengths 8k,32k --ranks 2,3,4 \\
        --output benchmarks/results/cp_model_qwen_overlap.json

The model is a model: it says what the chain's schedule costs given those times, not what a
group of Macs measures. It replays what the chain does: a rank forwards a layer's rows as soon
as its own keys and values exist and attends while they travel (compute and messages on two
streams), rank 0 ranks a pruning layer before its own attention, and the Aux gathering runs
after the first logits; the chain before that overlap (`serial_*`) is replayed beside it.
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
from dataclasses import asdict, dataclass
from pathlib import Path

import mlx.core as mx
import numpy as np

from lazymlx import LazyState, context_parallel, distributed
from lazymlx.context_parallel import partition, weighted_costs
from lazymlx.engine.blocks import append_kv, attention_mask, attention_scores, block_forward
from lazymlx.engine.cache import LazyKVCache, causal_mask
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


@dataclass
class Costs:
    """Seconds for one block, fitted from times measured here: c0 + c_tok·q + c_pair·(q·k +
    q(q+1)/2) for q queries after k earlier rows (the whole block); p0 + p_tok·q for the q
    tokens' projection alone (norm, queries, keys, values, rope), the part a rank runs before
    it forwards; r0 + r_row·rows for rank 0's ranking of a pruning layer's rows."""

    c0: float
    c_tok: float
    c_pair: float
    p0: float
    p_tok: float
    r0: float
    r_row: float

    def block(self, queries: int, earlier: int) -> float:
        pairs = queries * earlier + queries * (queries + 1) / 2
        return self.c0 + self.c_tok * queries + self.c_pair * pairs

    def project(self, queries: int) -> float:
        return self.p0 + self.p_tok * queries if queries else 0.0

    def attend(self, queries: int, earlier: int) -> float:
        """Attention and MLP once the keys are there: the block less its projection."""
        return max(self.block(queries, earlier) - self.project(queries), 0.0) if queries else 0.0

    def last(self, rows: int) -> float:
        """The deepest layer: every token's keys and values, the last token's output."""
        return self.project(rows) + self.attend(1, rows - 1)

    def rank(self, rows: int) -> float:
        return self.r0 + self.r_row * rows


def _median_time(work, repeats: int) -> float:
    runs = []
    for _ in range(repeats):
        runs.append(work())
    return sorted(runs)[len(runs) // 2]


def fit_block(model, window: int, repeats: int = 3) -> Costs:
    """The block, its projection and the ranking timed here (the median of `repeats` each) and
    fitted by least squares (Costs)."""
    state = LazyState(model)
    adapter, block = state.adapter, state.adapter.layers[0]
    x = mx.random.normal((1, 2560, adapter.hidden_size)).astype(state.dtype)
    mx.eval(x)

    def timed_block(q: int, k: int) -> float:
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
        return time.perf_counter() - started

    rows, times = [], []
    for q in (128, 512):
        for k in (0, 512, 2048):
            rows.append([1.0, q, q * k + q * (q + 1) / 2])
            times.append(_median_time(lambda q=q, k=k: timed_block(q, k), repeats))
    c0, c_tok, c_pair = np.linalg.lstsq(np.array(rows), np.array(times), rcond=None)[0]

    def timed_projection(q: int) -> float:
        cache, at = LazyKVCache(), mx.arange(q, dtype=mx.int32)
        started = time.perf_counter()
        queries = append_kv(adapter, block, cache, x[:, :q], at, 0)
        mx.eval(queries, cache.keys, cache.values)
        return time.perf_counter() - started

    sizes = (128, 512, 2048)
    times = [_median_time(lambda q=q: timed_projection(q), repeats) for q in sizes]
    p_tok, p0 = np.polyfit(sizes, times, 1)

    def timed_ranking(count: int) -> float:
        observed = mx.random.normal((1, adapter.num_heads, window, adapter.head_dim))
        keys = mx.random.normal((1, adapter.num_kv_heads, count, adapter.head_dim))
        at = mx.arange(count, dtype=mx.int32)
        observed, keys = observed.astype(state.dtype), keys.astype(state.dtype)
        mx.eval(observed, keys)
        started = time.perf_counter()
        mask = None if window == 1 else causal_mask(at, at[-window:])
        scores = attention_scores(observed, keys, block.self_attn.scale, mask)
        mx.eval(mx.argsort(-scores))
        return time.perf_counter() - started

    sizes = (1024, 4096, 16384)
    times = [_median_time(lambda r=r: timed_ranking(r), repeats) for r in sizes]
    r_row, r0 = np.polyfit(sizes, times, 1)
    fitted = (c0, c_tok, c_pair, p0, p_tok, r0, r_row)
    return Costs(*(max(float(v), 0.0) for v in fitted))


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


def stretched_masks(real: list[list[int]], from_tokens: int, tokens: int) -> list[np.ndarray]:
    """A real prompt's keep masks stretched to `tokens`: position i is kept where i·from/tokens
    was, so the kept share of each stretch of the prompt is the real one (where the kept tokens
    gather, they gather here too). A stand-in for a real run at that length."""
    source = np.minimum((np.arange(tokens) * from_tokens) // tokens, from_tokens - 1)
    out = []
    for positions in real:
        kept = np.zeros(from_tokens, bool)
        kept[np.asarray(positions)] = True
        present = np.flatnonzero(kept[source])
        out.append(np.union1d(present, [tokens - 1]))
    return out


def _sizes(adapter, itemsize: int, rows: int, deciding: bool, window: int) -> list[int]:
    """The messages a follower sends a layer: keys+values, positions (+ the last queries)."""
    if not rows:
        return []
    sizes = [2 * adapter.num_kv_heads * adapter.head_dim * itemsize * rows, 4 * rows]
    if deciding:
        sizes.append(adapter.num_heads * min(window, rows) * adapter.head_dim * itemsize)
    return sizes


def message(size: int) -> float:
    return LATENCY_S + size / BANDWIDTH if size else 0.0


def recut(positions, ranks: int, costs: Costs) -> list[int]:
    """Slice bounds that balance the carried tokens themselves (not the schedule's average)."""
    at = np.asarray(positions)
    cut = partition(at.size, ranks, costs.c_tok, costs.c_pair)
    return [0, *(int(at[i]) for i in cut[1:-1]), int(at[-1]) + 1]


def replay_chain(
    carried,
    bounds,
    costs: Costs,
    adapter,
    decisions,
    window,
    itemsize: int = 4,
    recutting: bool = False,
) -> tuple[float, float]:
    """(TTFT, the part of it rank 0 waits for the Aux slots after its last layer) of the chain
    as lazymlx/context_parallel.py runs it. Each rank has a compute stream and a message stream side by side. Per layer a
    rank projects its own tokens (needing nothing from the others), receives the earlier
    slices' rows, forwards them with its own at once, then attends and runs its MLP while they
    travel; a message occupies both ends' message streams. At a pruning layer rank 0 ranks as
    soon as every key is there, before its own attention, and the mask goes along the ring
    (rank 0 → 1 → … → n-1); a follower applies it before its next layer. At the deepest layer
    only rank 0 computes an output (its last token's). The Aux gathering runs on the message
    streams once a follower's last layer is done, beside rank 0's last layer, and rank 0 waits
    for it before its first token.

    recutting (what the chain does not do yet): the slices are cut again after each keep
    decision to balance the tokens still carried, the tokens that change slices moving their
    hidden states between the neighbours before the next layer."""
    ranks, deepest = len(bounds) - 1, len(carried) - 1
    if recutting:
        bounds = recut(carried[0], ranks, costs)
    lead = ranks - 1  # chain position of rank 0
    compute, comm = [0.0] * ranks, [0.0] * ranks
    for layer, positions in enumerate(carried):
        at = np.asarray(positions)
        deciding = layer in decisions and layer < deepest
        ready_to_send, sizes, decided = 0.0, [], 0.0
        for p in range(ranks):
            own = int(((at >= bounds[p]) & (at < bounds[p + 1])).sum())
            earlier = int((at < bounds[p]).sum())
            projected = compute[p] + costs.project(own)
            ready = projected
            if p and sizes:  # the earlier rows, from the previous position
                start = max(ready_to_send, comm[p - 1], comm[p])
                comm[p - 1] = comm[p] = start + sum(message(size) for size in sizes)
                ready = max(projected, comm[p])
            if p == lead:
                if deciding:
                    decided = ready = ready + costs.rank(earlier + own)
                if layer == deepest:  # the last token's output only
                    compute[p] = ready + costs.attend(1, earlier + own - 1)
                else:
                    compute[p] = ready + costs.attend(own, earlier)
            else:
                if layer < deepest and own:
                    compute[p] = ready + costs.attend(own, earlier)
                else:
                    compute[p] = projected
                ready_to_send = ready
                sizes = _sizes(adapter, itemsize, earlier + own, deciding, window)
        if deciding:  # the keep mask: rank 0 → position 0 → 1 → … → n-2
            arrived, sender = decided, lead
            for p in range(ranks - 1):
                start = max(arrived, comm[sender], comm[p])
                arrived = comm[sender] = comm[p] = start + message(at.size)
                compute[p] = max(compute[p], arrived)
                sender = p
            if recutting:
                following = np.asarray(carried[layer + 1])
                cut = recut(following, ranks, costs)
                for k in range(1, ranks):  # slices k-1 and k trade the tokens between the bounds
                    low, high = sorted((bounds[k], cut[k]))
                    moved = int(((following >= low) & (following < high)).sum())
                    if moved:
                        size = moved * adapter.hidden_size * itemsize
                        start = max(compute[k - 1], compute[k], comm[k - 1], comm[k])
                        done = start + message(size)
                        compute[k - 1] = compute[k] = comm[k - 1] = comm[k] = done
                bounds = cut
    last = set(np.asarray(carried[-1]).tolist())
    gone = np.array([i for i in range(bounds[-1]) if i not in last])
    gathered, slots = 0.0, 0
    for p in range(ranks - 1):
        slots = int((gone < bounds[p + 1]).sum()) if gone.size else 0
        start = max(gathered, compute[p], comm[p], comm[p + 1])
        gathered = comm[p] = comm[p + 1] = start + message(slots * adapter.hidden_size * itemsize)
    return max(compute[lead], gathered), max(gathered - compute[lead], 0.0)


def replay_serial(carried, bounds, costs: Costs, adapter, decisions, window) -> float:
    """The chain before the overlap (commit 7f9ee7c), for comparison: each rank receives a
    layer's rows, computes its slice, then forwards (a send blocks until the bytes have
    passed); at a pruning layer rank 0 ranks once its layer is done and the mask goes along the
    ring; rank 0 waits for the Aux gathering before its logits."""
    ranks, row = len(bounds) - 1, 2 * adapter.num_kv_heads * adapter.head_dim * 4 + 4
    ready = [0.0] * ranks
    for layer, positions in enumerate(carried):
        at = np.asarray(positions)
        sent = 0.0
        for p in range(ranks):
            own = int(((at >= bounds[p]) & (at < bounds[p + 1])).sum())
            earlier = int((at < bounds[p]).sum())
            compute = costs.block(own, earlier) if own else 0.0
            start = max(ready[p], sent) if p else ready[p]
            ready[p] = start + compute
            if p < ranks - 1:
                size = (earlier + own) * row
                if layer in decisions:
                    size += adapter.num_heads * min(window, earlier + own) * adapter.head_dim * 4
                sent = ready[p] + message(size)
                ready[p] = sent  # the send blocks until the bytes have passed
        if layer in decisions:
            ready[-1] += costs.rank(at.size)
            for p in range(ranks - 1):
                ready[p] = max(ready[p], ready[-1] + (p + 1) * message(at.size))
    last = set(np.asarray(carried[-1]).tolist())
    gone = [i for i in range(bounds[-1]) if i not in last]
    gathered = 0.0
    for p in range(ranks - 1):
        slots = sum(1 for i in gone if i < bounds[p + 1])
        gathered = max(gathered, ready[p]) + message(slots * adapter.hidden_size * 4)
    return max(ready[-1], gathered)


def replay_tensor(carried, costs: Costs, adapter, ranks: int) -> float:
    """Tensor parallelism: each layer's compute split evenly, plus two ring all-reduces of the
    layer's (tokens × hidden) fp32 activations."""
    total = 0.0
    for positions in carried:
        tokens = len(positions)
        size = tokens * adapter.hidden_size * 4
        reduce = 2 * (ranks - 1) * LATENCY_S + 2 * (ranks - 1) / ranks * size / BANDWIDTH
        total += costs.block(tokens, 0) / ranks + 2 * reduce
    return total


def one_process(carried, costs: Costs, decisions) -> float:
    """One process's prompt step: every layer whole, the deepest for its last token's output
    only, the ranking at each pruning layer."""
    deepest = len(carried) - 1
    total = sum(costs.block(len(p), 0) for p in carried[:deepest]) + costs.last(len(carried[-1]))
    return total + sum(costs.rank(len(carried[layer])) for layer in decisions)


def ttft_model(args: argparse.Namespace) -> None:
    model, _ = lazymlx.load(args.model)
    state = LazyState(model)
    adapter, itemsize = state.adapter, state.dtype.size
    layers, config = len(adapter.layers), resolve_preset(args.lazy, args.model)
    if args.fit:  # the times an earlier run fitted, replayed again (nothing timed)
        costs = Costs(**json.loads(Path(args.fit).read_text())["fit"])
    else:
        costs = fit_block(model, config.window)
    real = json.loads(Path(args.masks).read_text()) if args.masks else None
    table = {"model": args.model, "lazy": args.lazy, "fit": asdict(costs), "rows": []}
    table["fit_from"] = args.fit or "timed here"
    table["link"] = {"latency_s": LATENCY_S, "bytes_per_s": BANDWIDTH}
    table["protocol"] = "overlap: forward after the projection, rank before attention"
    deepest = layers - 1
    decisions = sorted(x for x in config.pruning_layers(layers) if x < deepest)
    for length in parse_lengths(args.lengths):
        whole = [np.arange(length)] * layers
        variants = []
        if real is not None and abs(real["tokens"] - length) <= 0.01 * length:
            length = real["tokens"]  # "8k" of the passkey prompt: 8,177 tokens
            whole = [np.arange(length)] * layers
            variants.append(("real", [np.array(p) for p in real["carried"]]))
        else:
            variants.append(("spread", spread_masks(config, length, layers)))
            if real is not None:
                stretched = stretched_masks(real["carried"], real["tokens"], length)
                variants.append((f"real {real['tokens']} stretched", stretched))
        for masks_from, pruned in variants:
            one = {"one_off": one_process(whole, costs, [])}
            one["one_pruned"] = one_process(pruned, costs, decisions)
            for ranks in map(int, args.ranks.split(",")):
                row = {"tokens": length, "ranks": ranks, "masks": masks_from, **one}
                for name, carried, deciding in (("off", whole, []), ("pruned", pruned, decisions)):
                    token, pair = costs.c_tok, costs.c_pair
                    if deciding:
                        token, pair = weighted_costs(config, layers, token, pair)
                    bounds = partition(length, ranks, token, pair)
                    ttft, aux = replay_chain(
                        carried, bounds, costs, adapter, deciding, config.window, itemsize
                    )
                    row[f"chain_{name}"], row[f"chain_{name}_aux_wait"] = ttft, aux
                    if deciding:
                        row[f"recut_{name}"] = replay_chain(
                            carried, bounds, costs, adapter, deciding, config.window, itemsize, True
                        )[0]
                    row[f"serial_{name}"] = replay_serial(
                        carried, bounds, costs, adapter, deciding, config.window
                    )
                    row[f"tensor_{name}"] = replay_tensor(carried, costs, adapter, ranks)
                    row[f"bounds_{name}"] = bounds
                row["chain_pruned_vs_one_pruned"] = row["chain_pruned"] / one["one_pruned"]
                row["serial_pruned_vs_one_pruned"] = row["serial_pruned"] / one["one_pruned"]
                row["recut_pruned_vs_one_pruned"] = row["recut_pruned"] / one["one_pruned"]
                row["chain_off_vs_one_off"] = row["chain_off"] / one["one_off"]
                table["rows"].append(row)
                print(
                    f"{length:>6} tokens, {ranks} ranks ({masks_from} masks): one process "
                    f"{one['one_off']:.2f} s / pruned {one['one_pruned']:.2f} s; chain "
                    f"{row['chain_off']:.2f} / {row['chain_pruned']:.2f} s "
                    f"({row['chain_pruned_vs_one_pruned']:.2f}x the pruned one; without the "
                    f"overlap {row['serial_pruned_vs_one_pruned']:.2f}x, re-cut at pruning layers "
                    f"{row['recut_pruned_vs_one_pruned']:.2f}x); tensor "
                    f"{row['tensor_off']:.2f} / {row['tensor_pruned']:.2f} s"
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
    parser.add_argument("--fit", default=None, help="model: an earlier output's fit to replay")
    args = parser.parse_args()
    {"masks": masks, "chain": chain, "chain-rank": chain_rank, "model": ttft_model}[args.job](args)


if __name__ == "__main__":
    main()
