"""Tensor parallelism measured on this machine: SmolLM2 in one process against groups of ranks.

For each group size, the ranks run on loopback (mlx.launch, ring backend; one plain process for a
group of 1), and each rank, for `off` (stock mlx-lm) and `default`:
- generates greedily on the bench's passkey prompt (TTFT, tokens, text, peak memory) after one
  warm-up, as `lazymlx bench` does;
- runs the prompt step alone once more, counting the bytes its collectives take in (the
  activation traffic: each all_sum's input, per rank), the weights and KV bytes it holds after
  it, and hashes of the (layer, tokens) it computed, its depths and its Aux slots;
- generates greedily on short everyday prompts (lazymlx/prompts.py: chat questions and
  completions).
The driver compares the ranks with each other and with one process, and prints the table.

    .venv/bin/python benchmarks/distributed.py --prompt-len 2k --groups 1,3 \\
        --output benchmarks/results/distributed_2k.json
"""

from __future__ import annotations

import lazymlx  # first: it binds OpenBLAS, which only works before anything imports MLX

# isort: split
import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten
from mlx_lm.models.cache import make_prompt_cache

from lazymlx import LazyState
from lazymlx.engine.config import PRESETS
from lazymlx.engine.prefill import PREFILL_CHUNK, prompt_step
from lazymlx.evals.timing import bench_prompt, header
from lazymlx.lengths import parse_lengths
from lazymlx.parallel import collectives, distributed
from lazymlx.prompts import everyday_prompts, holds_answer

MODES = {"off": None, "gentle": PRESETS["gentle"]}
COLLECTIVES = ("all_sum", "all_max", "all_min", "all_gather")


class Traffic:
    """Bytes entering mx.distributed's collectives (mlx-lm's sharded layers and lazymlx's
    pruning scores call them through the module, so wrapping the module counts them all)."""

    def __init__(self) -> None:
        self.bytes = 0
        for name in COLLECTIVES:
            setattr(mx.distributed, name, self._counted(getattr(mx.distributed, name)))

    def _counted(self, collective):
        def counted(x, *args, **kwargs):
            self.bytes += x.nbytes if isinstance(x, mx.array) else 4
            return collective(x, *args, **kwargs)

        return counted


def replicated_weight(name: str) -> bool:
    """What model.shard leaves whole on every rank: the embedding, the head and the norms."""
    module = name.split(".")[-2]
    return module in ("embed_tokens", "lm_head") or module.endswith("norm")


def digest(value) -> str:
    data = np.array(value).tobytes() if isinstance(value, mx.array) else json.dumps(value).encode()
    return hashlib.sha256(data).hexdigest()[:16]


def generate(model, tokenizer, prompt: list[int], tokens: int, config) -> dict:
    responses = list(lazymlx.stream_generate(model, tokenizer, prompt, tokens, lazy=config))
    return {
        "ttft_s": responses[-1].ttft_s,
        "generation_tps": responses[-1].generation_tps,
        "peak_memory_gb": responses[-1].peak_memory,
        "tokens": [r.token for r in responses],
        "text": "".join(r.text for r in responses),
        "logprobs": responses[0].logprobs,
    }


def prompt_pass(model, prompt: list[int], config, traffic: Traffic) -> dict:
    """The prompt step alone: its collectives' bytes, what it leaves in memory, what it kept."""
    tokens = mx.array(prompt)
    traffic.bytes = 0
    if config is None or not (config.prunes and tokens.size >= config.min_prompt):
        # stock mlx-lm's prefill, and the engine's for prompts it runs whole: the model's own
        # forward pass, chunk by chunk
        cache = make_prompt_cache(model)
        for start in range(0, tokens.size, PREFILL_CHUNK):
            mx.eval(model(tokens[None, start : start + PREFILL_CHUNK], cache=cache))
        kv = sum(c.nbytes for c in cache)
        return {"sent_bytes": traffic.bytes, "kv_bytes": kv, "fraction": 1.0}
    state = LazyState(model)
    state.record = []
    prompt_step(state, tokens, config)
    return {
        "sent_bytes": traffic.bytes,
        "kv_bytes": state.kv_bytes,
        "aux_bytes": state.aux_bytes,
        "fraction": state.pairs() / (tokens.size * state.num_layers),
        "kept": digest(state.record),
        "depths": digest(state.aux.depths()),
        "aux": None if state.aux.hidden is None else digest(state.aux.hidden[: state.offset]),
    }


def worker(args: argparse.Namespace) -> None:
    """One rank: everything it measured to OUT/rank<r>.json, first-step log-probs beside it."""
    joined = distributed.join()
    traffic = Traffic()
    model, tokenizer = lazymlx.load(args.model, group=joined)
    rank, out = collectives.rank(), Path(args.out)
    weights = dict(tree_flatten(model.parameters()))
    replicated = sum(v.nbytes for name, v in weights.items() if replicated_weight(name))
    shorts = [tokens for _, tokens in everyday_prompts(tokenizer)][: args.short]
    prompt = bench_prompt(tokenizer, "passkey", args.length)
    result = {
        "rank": rank,
        "group": collectives.size(),
        "weight_bytes": sum(v.nbytes for v in weights.values()),
        "replicated_bytes": replicated,
        "prompt_tokens": len(prompt.tokens),
        "modes": {},
    }
    for mode, config in MODES.items():
        generate(model, tokenizer, prompt.tokens, 2, config)  # warm up at the timed length
        mx.reset_peak_memory()
        run = generate(model, tokenizer, prompt.tokens, args.gen_len, config)
        np.save(out / f"logprobs-{mode}-rank{rank}.npy", np.array(run.pop("logprobs")))
        run["passkey_right"] = holds_answer(run["text"], prompt.answer)
        run["prompt_step"] = prompt_pass(model, prompt.tokens, config, traffic)
        run["short"] = [
            generate(model, tokenizer, tokens, args.short_tokens, config)["tokens"]
            for tokens in shorts
        ]
        result["modes"][mode] = run
    (out / f"rank{rank}.json").write_text(json.dumps(result))


def run_group(size: int, args: argparse.Namespace, out: Path) -> list[dict]:
    command = [__file__, "--worker", "--out", str(out), "--model", args.model]
    command += ["--prompt-len", str(args.length), "--gen-len", str(args.gen_len)]
    command += ["--short", str(args.short), "--short-tokens", str(args.short_tokens)]
    if size > 1:
        launch = [str(Path(sys.executable).parent / "mlx.launch"), "-n", str(size)]
        launch += ["--backend", "ring", "--starting-port", str(distributed.free_ports(size))]
        command = [*launch, "--python", sys.executable, *command]
    else:
        command = [sys.executable, *command]
    subprocess.run(command, check=True)
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(size)]
    for rank in ranks:
        for mode, run in rank["modes"].items():
            run["logprobs"] = np.load(out / f"logprobs-{mode}-rank{rank['rank']}.npy")
    return ranks


def compare(groups: dict[int, list[dict]]) -> list[dict]:
    """Per group and mode: rank 0's numbers, the worst rank's memory, how the ranks and the
    answers compare with one process, and the traffic against keep-all's."""
    one = groups[min(groups)][0]
    rows = []
    for size, ranks in groups.items():
        lead = ranks[0]
        for mode, run in lead["modes"].items():
            alone = one["modes"][mode]
            steps = [rank["modes"][mode]["prompt_step"] for rank in ranks]
            keep_all = lead["modes"]["off"]["prompt_step"]["sent_bytes"]
            held = max(
                r["weight_bytes"] + r["modes"][mode]["prompt_step"]["kv_bytes"] for r in ranks
            )
            predicted = (
                one["replicated_bytes"]
                + (one["weight_bytes"] - one["replicated_bytes"]) / size
                + alone["prompt_step"]["kv_bytes"] / size
            )
            rows.append(
                {
                    "group": size,
                    "mode": mode,
                    "prompt_tokens": lead["prompt_tokens"],
                    "ttft_s": run["ttft_s"],
                    "generation_tps": run["generation_tps"],
                    "peak_memory_gb": max(r["modes"][mode]["peak_memory_gb"] for r in ranks),
                    "weights_kv_gb": held / 1e9,
                    "weights_kv_vs_one": held
                    / (one["weight_bytes"] + alone["prompt_step"]["kv_bytes"]),
                    "weights_kv_vs_predicted": held / predicted,
                    "compute_fraction": run["prompt_step"]["fraction"],
                    "sent_mb": run["prompt_step"]["sent_bytes"] / 1e6,
                    "sent_vs_keep_all": run["prompt_step"]["sent_bytes"] / keep_all
                    if size > 1
                    else None,
                    "same_tokens_as_one": run["tokens"] == alone["tokens"],
                    "same_short_tokens_as_one": run["short"] == alone["short"],
                    "logprob_gap": float(np.abs(run["logprobs"] - alone["logprobs"]).max()),
                    "ranks_kept_alike": len({json.dumps(s, sort_keys=True) for s in steps}) == 1,
                    "passkey_right": run["passkey_right"],
                    "text": run["text"],
                }
            )
    return rows


def table(rows: list[dict]) -> str:
    lines = [
        "| ranks | mode | TTFT (s) | gen tok/s | peak GB/rank | weights+KV GB/rank | vs one "
        "| vs predicted | prefill computed | sent MB/rank | vs keep-all | = one process "
        "(passkey, short) | max Δ logprob | ranks alike |",
        "|" + "---|" * 14,
    ]
    for r in rows:
        share = "—" if r["sent_vs_keep_all"] is None else f"{r['sent_vs_keep_all']:.0%}"
        same = f"{'yes' if r['same_tokens_as_one'] else 'no'}, "
        same += "yes" if r["same_short_tokens_as_one"] else "no"
        lines.append(
            f"| {r['group']} | `{r['mode']}` | {r['ttft_s']:.2f} | {r['generation_tps']:.1f} "
            f"| {r['peak_memory_gb']:.2f} | {r['weights_kv_gb']:.3f} | {r['weights_kv_vs_one']:.2f}x "
            f"| {r['weights_kv_vs_predicted']:.2f}x | {r['compute_fraction']:.0%} "
            f"| {r['sent_mb']:.0f} | {share} | {same} | {r['logprob_gap']:.1e} "
            f"| {'yes' if r['ranks_kept_alike'] else 'no'} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--prompt-len", default="2k", help="passkey prompt tokens: 512, 2k, ...")
    parser.add_argument("--groups", default="1,3", help="group sizes, the first one the reference")
    parser.add_argument("--gen-len", type=int, default=32)
    parser.add_argument("--short", type=int, default=8, help="how many short prompts")
    parser.add_argument("--short-tokens", type=int, default=16)
    parser.add_argument("--output", help="the raw JSON")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    (args.length,) = parse_lengths(args.prompt_len)
    if args.worker:
        worker(args)
        return
    if not args.output:
        parser.error("--output is required")
    sizes = [int(size) for size in args.groups.split(",")]
    with tempfile.TemporaryDirectory() as scratch:
        groups = {}
        for size in sizes:
            out = Path(scratch) / str(size)
            out.mkdir()
            groups[size] = run_group(size, args, out)
    rows = compare(groups)
    for ranks in groups.values():
        for rank in ranks:
            for run in rank["modes"].values():
                run.pop("logprobs")
    report = header(args.model, prompt="passkey", gen_len=args.gen_len, backend_group="ring")
    report |= {"rows": rows, "ranks": {str(size): ranks for size, ranks in groups.items()}}
    Path(args.output).write_text(json.dumps(report, indent=1))
    print(table(rows))


if __name__ == "__main__":
    main()
