"""Context parallelism (lazymlx/parallel/context_parallel.py) measured, and its TTFT modelled.

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
    # c0 + c_tok·queries + c_pair·(query, key) pairs (the projection and rank 0's ranking timed
    # apart), replayed through the chain per (slice, layer) with the real keep masks (from
    # `masks`; at other lengths spread evenly, and the real ones stretched), the messages' sizes
    # and a link's latency and bandwidth; beside it the chain before the overlap, tensor
    # parallelism's and one process's, all from the same fit, and the chain's bytes against
    # tensor parallelism's (--fit FILE replays an earlier output's fit, timing nothing; --lazy
    # takes a preset or a calibration candidate's name, e.g. "0.5@24% 0.3@57% min1024 sparse")
    .venv/bin/python benchmarks/context_parallel.py model -m qwen2.5-coder-0.5b \\
        --masks benchmarks/results/cp_masks_qwen_8k.json --lengths 8k,32k --ranks 2,3,4 \\
        --output benchmarks/results/cp_model_qwen.json

The model is a model: it says what the chain's schedule costs given those times, not what a
group of Macs measures. It replays the chain as lazymlx/parallel/context_parallel.py runs it: a rank
projects its slice, takes the earlier rows, posts them with its own to the next rank and attends
while they travel, waiting for the send once its compute is done; rank 0 ranks a pruning layer
before its own attention; the chain before that overlap (`serial_*`) is replayed beside it.
"""

from __future__ import annotations

import contextlib
import os

# --cores-per-rank: each rank (and the one process) on cores of its own, as on a machine of its
# own; set before OpenBLAS starts its threads, which keep the affinity they start with
if CORES_PER_RANK := int(os.environ.get("CP_CORES_PER_RANK", "0")):
    _first = int(os.environ.get("MLX_RANK", "0")) * CORES_PER_RANK
    os.environ["OPENBLAS_NUM_THREADS"] = str(CORES_PER_RANK)
    with contextlib.suppress(OSError):  # a sandbox may refuse; the thread count still holds
        os.sched_setaffinity(0, range(_first, _first + CORES_PER_RANK))

import lazymlx  # first: it binds OpenBLAS, which only works before anything imports MLX

# isort: split
import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import numpy as np

from lazymlx import LazyState
from lazymlx.engine.blocks import append_kv, attention_mask, attention_scores, block_forward
from lazymlx.engine.cache import LazyKVCache, causal_mask
from lazymlx.engine.prefill import prompt_step
from lazymlx.evals.choice import preset_or_candidate
from lazymlx.evals.timing import bench_prompt
from lazymlx.lengths import parse_lengths
from lazymlx.parallel import context_parallel, distributed
from lazymlx.parallel.context_parallel import partition, weighted_costs

MACHINE = "2 shared CPU cores, MLX CPU (fp32), ranks on loopback (ring backend)"
# Qwen2.5-Coder-0.5B's layers (Llama-shaped: its q/k/v biases cost nothing to speak of), for
# timing where its weights cannot go; the vocabulary is the tiny byte tokenizer's
QWEN_SHAPE = dict(
    num_layers=24,
    hidden_size=896,
    num_heads=14,
    num_kv_heads=2,
    intermediate_size=4864,
    context=32768,
)
LATENCY_S = 100e-6  # per message (Thunderbolt/Ethernet TCP, the issue's figure)
BANDWIDTH = 8e9  # bytes per second


# masks: one real prompt step


def masks(args: argparse.Namespace) -> None:
    model, tokenizer = lazymlx.load(args.model)
    (length,) = parse_lengths(args.lengths)
    prompt = bench_prompt(tokenizer, "passkey", length).tokens
    config = preset_or_candidate(args.lazy, args.model)
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


# shape: a random-weight model of Qwen's layer shape


def shape(args: argparse.Namespace) -> None:
    from lazymlx.models.tiny import write_tiny_model

    write_tiny_model(Path(args.out), **QWEN_SHAPE)
    print(f"{args.out}: random weights, Qwen2.5-Coder-0.5B's layer shape {QWEN_SHAPE}")


# chain: real ranks


def chain_rank(args: argparse.Namespace) -> None:
    """One rank (under mlx.launch) or one process: generate --runs times (warm-ups, then the
    timed run); rank 0 writes what it kept and its TTFT, every rank what it sent in the timed
    step."""
    joined = distributed.join() if "MLX_RANK" in os.environ else None
    if joined is not None:
        from lazymlx.parallel import collectives

        collectives.set_group(None)
        context_parallel.join(joined)
    chain = context_parallel.chain()
    model, tokenizer = lazymlx.load(args.model)
    out = Path(args.out)
    if chain is not None and not chain.leads:
        context_parallel.follow(model)
        sent = {"messages": chain.traffic.messages, "times": chain.times}
        sent["cores"] = sorted(os.sched_getaffinity(0))
        (out / f"rank{chain.rank}.json").write_text(json.dumps(sent))
        return
    prompt = bench_prompt(tokenizer, "passkey", parse_lengths(args.lengths)[0]).tokens
    config = preset_or_candidate(args.lazy, args.model)
    with context_parallel.lead():
        for _ in range(args.runs):  # the last one timed, after warm-ups
            state = LazyState(model)
            state.record = []
            responses = list(
                lazymlx.stream_generate(
                    model, tokenizer, prompt, args.gen_len, lazy=config, prompt_cache=state
                )
            )
    result = {
        "prompt_tokens": len(prompt),
        "tokens": [r.token for r in responses],
        "ttft_s": responses[0].ttft_s,
        "carried": [positions for _, positions in state.record[: state.num_layers]],
        "computed": computed(state.record, state.num_layers, len(prompt)),
        "depths": np.array(state.aux.depths()[: len(prompt)]).tolist(),
        "cores": sorted(os.sched_getaffinity(0)),
    }
    if chain is not None:
        plan = chain.plan
        result |= {"messages": chain.traffic.messages, "times": chain.times}
        result |= {"bounds": plan.bounds, "window": plan.window, "decisions": plan.decisions}
    (out / "rank0.json").write_text(json.dumps(result))


def computed(record, layers: int, prompt: int) -> list[list[int]]:
    """The prompt positions computed at each layer over the whole run (the prompt step's, and
    any a decode step revived): one process's stock prefill leaves the prompt's last token to
    the first decode step, so its prompt step alone is not the chain's."""
    out = [set() for _ in range(layers)]
    for layer, positions in record:
        out[layer].update(p for p in positions if p < prompt)
    return [sorted(p) for p in out]


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
            if rank != 0 and rows:  # one message: positions, keys+values (+ the last queries)
                messages, size = 1, rows * row
                if layer in decisions:
                    size += adapter.num_heads * min(window, rows) * adapter.head_dim * 4
            if layer in decisions and (rank + 1) % ranks != 0:  # the keep mask, forwarded
                messages, size = messages + 1, size + at.size
            per_layer.append((messages, size))
        out[rank] = per_layer
    return out


def run_ranks(command: list[str], ranks: int, timeout: float = 3600) -> None:
    """`command` in one process (ranks 1) or as `ranks` ranks of mlx.launch on loopback (ring
    backend, free ports), in its own process group, every process of it ended afterwards."""
    if ranks > 1:
        beside = Path(sys.executable).parent / "mlx.launch"
        launcher = str(beside) if beside.exists() else shutil.which("mlx.launch")
        launch = [launcher, "-n", str(ranks)]
        launch += ["--backend", "ring", "--starting-port", str(distributed.free_ports(ranks))]
        command = [*launch, "--python", sys.executable, *command[1:]]
    process = subprocess.Popen(command, start_new_session=True)
    try:
        if process.wait(timeout=timeout):
            raise SystemExit(f"{' '.join(command)} exited with {process.returncode}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def chain(args: argparse.Namespace) -> None:
    """One process, then each group size; the table of what matched and what was sent, written
    after each group size (a run cut short keeps what it measured)."""
    here = Path(tempfile.mkdtemp(prefix="cp_chain_"))  # the ranks' own files
    if args.cores_per_rank:
        os.environ["CP_CORES_PER_RANK"] = str(args.cores_per_rank)  # read by each rank first
    script = [sys.executable, __file__, "chain-rank", "-m", args.model, "-l", args.lengths]
    script += ["--lazy", args.lazy, "--gen-len", str(args.gen_len), "--runs", str(args.runs)]

    def run(ranks: int) -> dict:
        out = here / f"ranks{ranks}"
        out.mkdir(exist_ok=True)
        run_ranks([*script, "--out", str(out)], ranks)
        return {r: json.loads((out / f"rank{r}.json").read_text()) for r in range(ranks)}

    alone = run(1)[0]
    model, _ = lazymlx.load(args.model)
    adapter = LazyState(model).adapter
    table = {"model": args.model, "lazy": args.lazy, "prompt_tokens": alone["prompt_tokens"]}
    table |= {"machine": args.machine, "gen_len": args.gen_len, "tokens": alone["tokens"]}
    table["cores_per_rank"] = args.cores_per_rank or "all, shared"
    table["one_process_cores"] = alone["cores"]
    table["runs"] = f"{args.runs} per group size, the last timed"
    table["kept_per_layer"] = [len(p) for p in alone["carried"]]
    table["one_process_ttft_s"] = alone["ttft_s"]
    print(f"{args.model} {args.lazy}, {alone['prompt_tokens']} tokens "
          f"({table['kept_per_layer'][-1]} at the last layer): one process {alone['ttft_s']:.1f} s")  # fmt: skip
    for ranks in map(int, args.ranks.split(",")):
        group = table[f"ranks{ranks}"] = group_row(adapter, alone, run(ranks))
        Path(args.output).write_text(json.dumps(table, indent=1))
        print(f"{ranks} ranks: {group['ttft_s']:.1f} s ({group['ttft_vs_one_process']:.2f}x), "
              f"same as one process: {group['same_as_one_process']}")  # fmt: skip


def group_row(adapter, alone: dict, ranked: dict) -> dict:
    """One group's run against the one process's: what matched, TTFT, and what each rank sent
    against the formula and against tensor parallelism."""
    lead = ranked[0]
    checks = {
        "same_tokens": lead["tokens"] == alone["tokens"],
        "same_kept_rows": lead["computed"] == alone["computed"],
        "same_depths": lead["depths"] == alone["depths"],
    }
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
    return {
        **checks,
        "same_as_one_process": all(checks.values()),
        "ttft_s": lead["ttft_s"],
        "ttft_vs_one_process": lead["ttft_s"] / alone["ttft_s"],
        "cores": {rank: sent["cores"] for rank, sent in ranked.items()},
        "bounds": lead["bounds"],
        "per_rank": rows,
        "tensor_parallel_bytes_per_rank": tp,
        "chain_max_rank_bytes_vs_tp": max(r["bytes"] for r in rows) / tp,
        "chain_total_bytes_vs_tp_total": sum(r["bytes"] for r in rows) / (len(ranked) * tp),
    }


# model: the critical path, replayed


@dataclass
class Costs:
    """Seconds for one block, fitted from times measured here: c0 + c_tok·q + c_pair·(q·k +
    q(q+1)/2) for q queries after k earlier rows (the whole block); p0 + p_tok·q for the q
    tokens' projection alone (norm, queries, keys, values, rope), what a rank runs before it
    forwards; r0 + r_row·rows for rank 0's ranking of a pruning layer's rows."""

    c0: float
    c_tok: float
    c_pair: float
    p0: float
    p_tok: float
    r0: float
    r_row: float

    @classmethod
    def read(cls, data: dict) -> Costs:
        """From an output's "fit", "projection" and "ranking" (what `written` gives)."""
        if "projection" not in data or "ranking" not in data:
            raise SystemExit("--fit: the file has no projection or ranking times; time them anew")
        return cls(*data["fit"], *data["projection"], *data["ranking"])

    def written(self) -> dict:
        return {
            "fit": [self.c0, self.c_tok, self.c_pair],
            "projection": [self.p0, self.p_tok],
            "ranking": [self.r0, self.r_row],
        }

    def block(self, queries: int, earlier: int) -> float:
        pairs = queries * earlier + queries * (queries + 1) / 2
        return self.c0 + self.c_tok * queries + self.c_pair * pairs if queries else 0.0

    def project(self, queries: int) -> float:
        return self.p0 + self.p_tok * queries if queries else 0.0

    def attend(self, queries: int, earlier: int) -> float:
        """Attention and MLP once the keys are there: the block less its projection."""
        return max(self.block(queries, earlier) - self.project(queries), 0.0)

    def last(self, queries: int, earlier: int) -> float:
        """The deepest layer: every token's keys and values, the last token's output."""
        return self.project(queries) + self.attend(1, earlier + queries - 1) if queries else 0.0

    def rank(self, rows: int) -> float:
        return self.r0 + self.r_row * rows


def _median_time(work, repeats: int) -> float:
    return sorted(work() for _ in range(repeats))[repeats // 2]


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


def message(size: int) -> float:
    return LATENCY_S + size / BANDWIDTH if size else 0.0


def recut(positions, ranks: int, token_cost: float, pair_cost: float) -> list[int]:
    """Slice bounds (in positions) that balance the carried tokens themselves: `partition` over
    the tokens still carried, not the schedule's average over the whole prompt."""
    at = np.asarray(positions)
    cut = partition(at.size, ranks, token_cost, pair_cost)
    return [0, *(int(at[i]) for i in cut[1:-1]), int(at[-1]) + 1]


def moved(positions, before: list[int], after: list[int]) -> list[int]:
    """Tokens that cross each boundary between neighbours when the slices change."""
    at = np.asarray(positions)
    owner = lambda bounds: np.searchsorted(bounds, at, side="right") - 1  # noqa: E731
    old, new = owner(before), owner(after)
    return [int(((old <= b) != (new <= b)).sum()) for b in range(len(before) - 2)]


def _rows_bytes(adapter, rows: int, deciding: bool, window: int) -> int:
    """The one message a follower posts a layer: positions, keys+values (+ the last queries)."""
    size = (2 * adapter.num_kv_heads * adapter.head_dim * 4 + 4) * rows
    if rows and deciding:
        size += adapter.num_heads * min(window, rows) * adapter.head_dim * 4
    return size


def replay_chain(
    carried,
    bounds,
    costs: Costs,
    adapter,
    decisions,
    window,
    recutting: tuple[float, float] | None = None,
) -> float:
    """The time rank 0 has its logits and every Aux slot, the chain replayed as
    lazymlx/parallel/context_parallel.py runs it (positions 0..n-1 along it, rank 0 last).

    Per layer a rank projects its slice (beside its wait for the earlier rows), takes the
    earlier rows (one message: positions, keys and values, at a pruning layer the last
    queries) once the previous rank has posted them and it is at them (a message passes when
    both ends are), posts them with its own, and attends while they travel; it starts its next
    layer once its compute is done and its post has passed. At a pruning layer rank 0
    ranks before its own attention and posts the mask, which goes rank 1 → 2 → … → n-1, each
    taking it once its own layer is done and passing it on at once. At the deepest layer only
    rank 0 attends (its last token). Then the Aux slots go along the chain to rank 0.

    recutting (token_cost, pair_cost; not built in the chain): after each keep decision the
    slices are cut again to balance the tokens still carried, the tokens that change slices
    moving their hidden states (fp32) between neighbours, all ranks waiting for the largest
    move before the next layer."""
    ranks, deepest = len(bounds) - 1, len(carried) - 1
    lead = ranks - 1
    if recutting is not None:  # the first cut balances the whole prompt's layers too
        bounds = recut(carried[0], ranks, *recutting)
    free = [0.0] * ranks  # when each position starts its next layer
    for layer, positions in enumerate(carried):
        at = np.asarray(positions)
        deciding = layer in decisions and layer < deepest
        done, passed, posted, size, decided = [0.0] * ranks, [0.0] * ranks, 0.0, 0, 0.0
        for p in range(ranks):
            own = int(((at >= bounds[p]) & (at < bounds[p + 1])).sum())
            earlier = int((at < bounds[p]).sum())
            ready = free[p] + costs.project(own)
            if p and size:  # the earlier rows: posted by p - 1, taken once p is at them
                passed[p - 1] = max(posted, free[p]) + message(size)
                ready = max(ready, passed[p - 1])
            if p == lead:
                if deciding:
                    decided = ready = ready + costs.rank(earlier + own)
                attending = costs.attend(1, earlier + own - 1) if layer == deepest else None
                done[p] = ready + (costs.attend(own, earlier) if attending is None else attending)
            else:
                posted, size = ready, _rows_bytes(adapter, earlier + own, deciding, window)
                done[p] = ready + (costs.attend(own, earlier) if layer < deepest else 0.0)
        free = [max(d, s) for d, s in zip(done, passed, strict=True)]
        if deciding:  # rank 0's post, taken by position 0, passed on along the chain
            arrived = max(decided, free[0]) + message(at.size)
            free[lead], free[0] = max(free[lead], arrived), arrived
            for p in range(1, ranks - 1):
                arrived = max(free[p - 1], free[p]) + message(at.size)
                free[p - 1] = free[p] = arrived
            if recutting is not None and layer + 1 < len(carried):
                after = recut(carried[layer + 1], ranks, *recutting)
                crossing = moved(carried[layer + 1], bounds, after)
                move = max(message(n * adapter.hidden_size * 4) for n in crossing)
                free, bounds = [max(free) + move] * ranks, after
    last = set(np.asarray(carried[-1]).tolist())
    gone = np.array([i for i in range(bounds[-1]) if i not in last])
    gathered = 0.0
    for p in range(ranks - 1):
        slots = int((gone < bounds[p + 1]).sum()) if gone.size else 0
        start = max(gathered, free[p], free[p + 1])
        gathered = start + message(slots * adapter.hidden_size * 4)
    return max(free[lead], gathered)


def replay_serial(carried, bounds, costs: Costs, adapter, decisions, window) -> float:
    """The chain before the overlap (commit f566319), for comparison: each rank receives a
    layer's rows, computes its slice (at the deepest layer every rank its last token), then
    forwards, a send blocking until the bytes have passed; at a pruning layer rank 0 ranks once
    its layer is done and the mask goes along the ring; then the Aux slots go to rank 0."""
    ranks, row = len(bounds) - 1, 2 * adapter.num_kv_heads * adapter.head_dim * 4 + 4
    deepest = len(carried) - 1
    ready = [0.0] * ranks
    for layer, positions in enumerate(carried):
        at = np.asarray(positions)
        sent = 0.0
        for p in range(ranks):
            own = int(((at >= bounds[p]) & (at < bounds[p + 1])).sum())
            earlier = int((at < bounds[p]).sum())
            compute = costs.last if layer == deepest else costs.block
            start = max(ready[p], sent) if p else ready[p]
            ready[p] = start + compute(own, earlier)
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


def one_process(carried, costs: Costs, decisions) -> float:
    """One process's prompt step: every layer whole, the deepest for its last token's output
    only, the ranking at each pruning layer."""
    *layers, deepest = carried
    total = sum(costs.block(len(p), 0) for p in layers) + costs.last(len(deepest), 0)
    return total + sum(costs.rank(len(carried[layer])) for layer in decisions)


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


def stretched_masks(real: list[list[int]], from_tokens: int, tokens: int) -> list[np.ndarray]:
    """A real prompt's keep masks stretched to `tokens`: position i is kept where i·from/tokens
    was, so the kept share of each stretch of the prompt is the real one (where the kept tokens
    gather, they gather here too). A stand-in for a real run at that length."""
    source = np.minimum((np.arange(tokens) * from_tokens) // tokens, from_tokens - 1)
    out = []
    for positions in real:
        kept = np.zeros(from_tokens, bool)
        kept[np.asarray(positions)] = True
        out.append(np.union1d(np.flatnonzero(kept[source]), [tokens - 1]))
    return out


def mask_variants(config, real: dict | None, length: int, layers: int) -> list[tuple[str, list]]:
    """(what the masks are, carried positions per layer) to replay at `length`: a real run's
    where its prompt is within 1% of it ("8k" of the passkey prompt is 8,177 tokens); elsewhere
    the kept tokens spread evenly and, given a real run, its masks stretched."""
    if real is not None and abs(real["tokens"] - length) <= 0.01 * length:
        return [("real", [np.array(p) for p in real["carried"]])]
    variants = [("spread", spread_masks(config, length, layers))]
    if real is not None:
        stretched = stretched_masks(real["carried"], real["tokens"], length)
        variants.append((f"real {real['tokens']} stretched", stretched))
    return variants


def traffic(adapter, carried, bounds: list[int], window: int, decisions: list[int]) -> dict:
    """The chain's bytes in the prompt step (the protocol's formula) against tensor
    parallelism's at the same kept rows: two all-sums of (tokens × hidden) fp32 per layer."""
    sent = [
        sum(size for _, size in per_layer)
        for per_layer in expected_bytes(adapter, carried, bounds, window, decisions).values()
    ]
    tp = sum(2 * len(p) * adapter.hidden_size * 4 for p in carried)
    return {
        "busiest_rank_bytes": max(sent),
        "tensor_bytes_per_rank": tp,
        "busiest_rank_bytes_vs_tensor": max(sent) / tp,
        "all_ranks_bytes_vs_tensor": sum(sent) / (tp * len(sent)),
    }


def ttft_model(args: argparse.Namespace) -> None:
    model, _ = lazymlx.load(args.model)
    adapter = LazyState(model).adapter
    layers, config = len(adapter.layers), preset_or_candidate(args.lazy, args.model)
    if args.fit:  # an earlier run's fitted times, replayed again (nothing timed)
        costs = Costs.read(json.loads(Path(args.fit).read_text()))
    else:
        costs = fit_block(model, config.window)
    real = json.loads(Path(args.masks).read_text()) if args.masks else None
    table = {"model": args.model, "lazy": args.lazy, **costs.written(), "rows": []}
    table |= {"fit_from": args.fit or "timed here", "machine": MACHINE}
    table["link"] = {"latency_s": LATENCY_S, "bytes_per_s": BANDWIDTH}
    table["protocol"] = (
        "the shipped chain: a rank forwards a layer's rows once projected and attends while they "
        "travel, rank 0 ranks before its attention (chain_*); serial_*: the chain before that "
        "overlap (receive, compute the slice, forward)"
    )
    deepest = layers - 1
    decisions = sorted(x for x in config.pruning_layers(layers) if x < deepest)
    for length in parse_lengths(args.lengths):
        for masks_from, pruned in mask_variants(config, real, length, layers):
            tokens = len(pruned[0])
            whole = [np.arange(tokens)] * layers
            one = {"off": one_process(whole, costs, [])}
            one["pruned"] = one_process(pruned, costs, decisions)
            for ranks in map(int, args.ranks.split(",")):
                row = {"tokens": tokens, "ranks": ranks, "masks": masks_from}
                row |= {"one_off": one["off"], "one_pruned": one["pruned"]}
                for name, carried, deciding in (("off", whole, []), ("pruned", pruned, decisions)):
                    token, pair = costs.c_tok, costs.c_pair
                    if deciding:
                        token, pair = weighted_costs(config, layers, token, pair)
                    bounds = partition(tokens, ranks, token, pair)
                    row[f"bounds_{name}"] = bounds
                    replayed = (carried, bounds, costs, adapter, deciding, config.window)
                    row[f"chain_{name}"] = replay_chain(*replayed)
                    row[f"serial_{name}"] = replay_serial(*replayed)
                    row[f"tensor_{name}"] = replay_tensor(carried, costs, adapter, ranks)
                    row[f"{name}_traffic"] = traffic(
                        adapter, carried, bounds, config.window, deciding
                    )
                    for way in ("chain", "serial", "tensor"):
                        row[f"{way}_{name}_vs_one_{name}"] = row[f"{way}_{name}"] / one[name]
                table["rows"].append(row)
                print(
                    f"{tokens:>6} tokens, {ranks} ranks ({masks_from} masks): one process "
                    f"{one['off']:.1f} s / pruned {one['pruned']:.1f} s; chain "
                    f"{row['chain_off_vs_one_off']:.2f}x / {row['chain_pruned_vs_one_pruned']:.2f}x"
                    f" (before the overlap {row['serial_off_vs_one_off']:.2f}x / "
                    f"{row['serial_pruned_vs_one_pruned']:.2f}x); tensor "
                    f"{row['tensor_off_vs_one_off']:.2f}x / {row['tensor_pruned_vs_one_pruned']:.2f}x;"
                    f" busiest rank's bytes "
                    f"{row['pruned_traffic']['busiest_rank_bytes_vs_tensor']:.2f}x tensor's"
                )
    Path(args.output).write_text(json.dumps(table, indent=1))


# imbalance: what real keep masks do to the slices


def slice_counts(positions, bounds: list[int]) -> list[int]:
    """How many of the positions fall in each slice."""
    return np.histogram(np.asarray(positions), bins=bounds)[0].tolist()


def imbalance(args: argparse.Namespace) -> None:
    """Per group size: the slices the chain cuts (its own timed costs, weighted by the
    schedule), each rank's share of the tokens carried past the first pruning layer and of the
    work after it (block times fitted here), and the modelled TTFT as shipped against re-cutting
    the slices at every pruning layer (not built), beside one process's pruned TTFT."""
    model, _ = lazymlx.load(args.model)
    state = LazyState(model)
    adapter, layers = state.adapter, state.num_layers
    config = preset_or_candidate(args.lazy, args.model)
    real = json.loads(Path(args.masks).read_text())
    carried, tokens = [np.array(p) for p in real["carried"]], real["tokens"]
    timed = context_parallel.timed_costs(state)  # what the chain cuts by, timed here
    weighted = weighted_costs(config, layers, *timed)
    costs = fit_block(model, config.window)
    cost = costs.block

    decisions = sorted(x for x in config.pruning_layers(layers) if x < layers - 1)
    past = decisions[0] + 1  # the first layer after a keep decision
    one = one_process(carried, costs, decisions)
    table = {"model": args.model, "lazy": args.lazy, "tokens": tokens, "machine": MACHINE}
    table |= {**costs.written(), "timed_costs": list(timed), "decisions": decisions}
    table |= {"link": {"latency_s": LATENCY_S, "bytes_per_s": BANDWIDTH}, "rows": []}
    table["one_process_pruned_s"] = one
    for ranks in map(int, args.ranks.split(",")):
        bounds = partition(tokens, ranks, *weighted)
        held = slice_counts(carried[past], bounds)
        work = np.zeros(ranks)  # each rank's compute in the layers after the first prune
        slowest = 0.0  # the sum over those layers of the slowest rank's compute
        for positions in carried[past:]:
            earlier = np.cumsum([0, *slice_counts(positions, bounds)])
            per = [cost(n, int(earlier[p])) for p, n in enumerate(slice_counts(positions, bounds))]
            work, slowest = work + per, slowest + max(per)
        shipped = replay_chain(carried, bounds, costs, adapter, decisions, config.window)
        cut = replay_chain(
            carried, bounds, costs, adapter, decisions, config.window, (costs.c_tok, costs.c_pair)
        )
        row = {
            "ranks": ranks,
            "bounds": bounds,
            "carried_past_first_prune": held,
            "rank0_share_of_carried": held[-1] / sum(held),
            "work_after_first_prune_s": work.tolist(),
            "slowest_vs_mean_after_first_prune": slowest / work.mean() if work.any() else 1.0,
            "chain_s": shipped,
            "recut_s": cut,
            "chain_vs_one_pruned": shipped / one,
            "recut_vs_one_pruned": cut / one,
        }
        table["rows"].append(row)
        print(
            f"{ranks} ranks, slices {np.diff(bounds).tolist()}: rank 0 holds {held[-1]} of "
            f"{sum(held)} carried past layer {past - 1} ({row['rank0_share_of_carried']:.0%}); "
            f"after it the slowest rank's layers take {row['slowest_vs_mean_after_first_prune']:.2f}x"
            f" the mean; chain {shipped:.1f} s ({shipped / one:.2f}x one process's pruned "
            f"{one:.1f} s), re-cut {cut:.1f} s ({cut / one:.2f}x)"
        )
    Path(args.output).write_text(json.dumps(table, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    jobs = {"masks": masks, "chain": chain, "chain-rank": chain_rank, "model": ttft_model}
    jobs |= {"imbalance": imbalance, "shape": shape}
    parser.add_argument("job", choices=list(jobs))
    parser.add_argument("-m", "--model", default="smollm2-135m")
    parser.add_argument("-l", "--lengths", default="2k")
    parser.add_argument("--lazy", default="default")
    parser.add_argument("--output", default=None)
    parser.add_argument("--out", default=None)
    parser.add_argument("--gen-len", type=int, default=8)
    parser.add_argument("--runs", type=int, default=2, help="chain: runs, the last timed")
    parser.add_argument("--ranks", default="2")
    parser.add_argument("--masks", default=None)
    parser.add_argument("--fit", default=None, help="model: replay this earlier output's fit")
    parser.add_argument("--cores-per-rank", type=int, default=0, help="chain: pin each rank")
    parser.add_argument("--machine", default=MACHINE, help="chain: what the table ran on")
    args = parser.parse_args()
    jobs[args.job](args)


if __name__ == "__main__":
    main()
