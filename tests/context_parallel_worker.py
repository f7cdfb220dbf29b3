"""One rank of tests/test_context_parallel.py, as mlx.launch runs it (or one process, for reference).

    context_parallel_worker.py MODEL OUT_DIR PROMPT CONFIGS [PROMPT_SEED]

Every rank loads MODEL whole and joins the chain (lazymlx/parallel/context_parallel.py); rank 0 generates
greedily for each config named in CONFIGS (comma-separated: keep-all, pruning, static, mass, point, or a
preset of MODEL's such as fast), a second turn over the same context (on rank 0 alone), and
writes what it kept to OUT_DIR/rank0.json and its context's arrays to OUT_DIR/<config>.npz; the
other ranks follow. PROMPT is a count of random tokens, or passkey:COUNT for the bench's passkey
prompt of about COUNT tokens (a real model's). Run without mlx.launch it is the one-process
reference. Every rank joins as the CLI's do (lazymlx/parallel/distributed.py: join), so a rank that ends
on a lost or stalled neighbour, or on mlx.launch's SIGTERM, writes its one line.

CP_TEST_STALL=RANK:LAYER in the environment makes that rank stop itself (SIGSTOP) when its slice
reaches LAYER of the prompt step: a rank stalled mid-prompt with its connections open.
"""

from __future__ import annotations

import lazymlx  # first: it binds OpenBLAS, which only works before anything imports MLX

# isort: split
import json
import os
import signal
import sys
from dataclasses import replace
from pathlib import Path

import distributed_worker  # beside this file: the tensor-parallel worker
import mlx.core as mx
import numpy as np

from lazymlx import LazyConfig, LazyState
from lazymlx.engine.presets import resolve_preset
from lazymlx.evals.timing import bench_prompt
from lazymlx.parallel import collectives, context_parallel, distributed
from lazymlx.parallel.chain_lane import ChainLane

# tests/distributed_worker.py's, without idle completion
PRUNING = replace(distributed_worker.PRUNING, complete="never")
CONFIGS = {
    "keep-all": LazyConfig(),
    "pruning": PRUNING,
    "static": replace(PRUNING, selection="static"),
    # a mass rule: the count comes from the last rank's scores, and every rank keeps it
    "mass": replace(PRUNING, schedule=((0.25, 1.0), (0.5, 0.8)), mass=0.7, least=0.05),
    # the first cut where the window points at the text, that place kept with its neighbours
    "point": replace(
        PRUNING, schedule=((0.17, 1.0), (0.67, 0.8)), mass=0.7, least=0.05, point=0.006
    ),
}


def arrays(state: LazyState) -> dict[str, np.ndarray]:
    out = {"depths": np.array(state.aux.depths()), "ids": np.array(state.aux.ids[: state.offset])}
    if state.aux.hidden is not None:
        out["aux"] = np.array(state.aux.hidden[: state.offset])
    for layer, cache in enumerate(state.layers):
        keys, values = cache.fetch()
        out[f"k{layer}"], out[f"v{layer}"] = np.array(keys), np.array(values)
        out[f"p{layer}"] = np.array(cache.row_positions())
    return out


def run(model, tokenizer, prompt: list[int], name: str, out: Path, model_path: str) -> dict:
    config = CONFIGS[name] if name in CONFIGS else resolve_preset(name, model_path)
    state = LazyState(model)
    state.record = []
    first = list(
        lazymlx.stream_generate(model, tokenizer, prompt, 6, lazy=config, prompt_cache=state)
    )
    record = list(state.record)
    np.savez(out / f"{name}.npz", **arrays(state))
    turn = list(
        lazymlx.stream_generate(model, tokenizer, [7, 8, 9], 3, lazy=config, prompt_cache=state)
    )
    return {
        "record": record,
        "tokens": [r.token for r in first],
        "turn": [r.token for r in turn],
        "logprobs": np.array(first[0].logprobs).tolist(),
    }


def stall_at(layer: int) -> None:
    """Stop this process when its slice of a prompt step reaches `layer`."""
    reach = ChainLane.reach

    def stalling(lane: ChainLane, at: int, deciding: bool) -> mx.array | None:
        if at == layer:
            os.kill(os.getpid(), signal.SIGSTOP)
        return reach(lane, at, deciding)

    ChainLane.reach = stalling


def main() -> None:
    model_path, out, length, names = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4]
    seed = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    if "MLX_RANK" in os.environ:
        group = distributed.join()
        collectives.set_group(None)  # as the CLI's --parallel context: the model whole
        context_parallel.join(group)
        rank, _, layer = os.environ.get("CP_TEST_STALL", "-1:").partition(":")
        if int(rank) == group.rank():
            stall_at(int(layer))
    model, tokenizer = lazymlx.load(model_path)
    if context_parallel.chain() is not None and not context_parallel.chain().leads:
        context_parallel.follow(model)
        return
    if length.startswith("passkey:"):
        prompt = bench_prompt(tokenizer, "passkey", int(length.split(":")[1])).tokens
    else:
        prompt = np.random.default_rng(seed).integers(3, 250, size=int(length)).tolist()
    with context_parallel.lead():
        result = {
            name: run(model, tokenizer, prompt, name, out, model_path) for name in names.split(",")
        }
    (out / "rank0.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
