"""One rank of tests/test_distributed.py, as mlx.launch runs it (or one process, for reference).

    distributed_worker.py MODEL OUT_DIR PROMPT_TOKENS [HEAD_REDUCTIONS, default mean,max]

Loads MODEL split over the group, runs a pruning prompt step, reviving decode steps, a second
prompt step over the context (revival in a prompt step), a save and a load of the context and
the same step on the loaded and the kept context, for both head reductions, and writes what
this rank computed and kept to OUT_DIR/rank<r>.json: the (layer, positions) each step computed,
hashes of the depths and Aux slots, the greedy tokens and the first step's log-probabilities.
"""

from __future__ import annotations

import lazymlx  # first: it binds OpenBLAS, which only works before anything imports MLX

# isort: split
import hashlib
import json
import sys
from dataclasses import replace
from pathlib import Path

import mlx.core as mx
import numpy as np

from lazymlx import LazyConfig, LazyState
from lazymlx.contexts import Context, load_context, save_context
from lazymlx.engine import config as engine_config
from lazymlx.parallel import collectives, distributed

# the engine's constants scaled to the tiny model, in every rank's process
engine_config.KEEP_FIRST, engine_config.WINDOW, engine_config.POOL = 2, 4, 2
engine_config.REVIVE, engine_config.REVIVE_STEPS = 4, None
PRUNING = LazyConfig(schedule=((0.25, 0.5), (0.5, 0.5)), decode="revive", min_prompt=0)


def digest(array: mx.array) -> str:
    return hashlib.sha256(np.array(array).tobytes()).hexdigest()


# the decode policies: revival reads the whole group's attention at every decode step too
VARIANTS = {"revive": PRUNING, "sparse": replace(PRUNING, decode="sparse")}


def run(model, tokenizer, prompt: list[int], variant: str, out: Path) -> dict:
    config = VARIANTS[variant]
    state = LazyState(model)
    state.record = []
    first = list(
        lazymlx.stream_generate(model, tokenizer, prompt, 6, lazy=config, prompt_cache=state)
    )
    turn = list(range(40, 100))  # a second prompt step: revives context tokens it needs
    second = list(
        lazymlx.stream_generate(model, tokenizer, turn, 3, lazy=config, prompt_cache=state)
    )
    path = out / f"context-{variant}.safetensors"
    save_context(path, Context(state, state.tokens, config=config), "tiny", variant)
    loaded = load_context(path, model, "tiny", config)[0].cache
    again = list(
        lazymlx.stream_generate(model, tokenizer, [7, 8, 9], 3, lazy=config, prompt_cache=loaded)
    )
    kept = list(
        lazymlx.stream_generate(model, tokenizer, [7, 8, 9], 3, lazy=config, prompt_cache=state)
    )
    return {
        "record": state.record,
        "depths": digest(state.aux.depths()),
        "aux": digest(state.aux.hidden[: state.offset]),
        "kv_rows": [cache.rows for cache in state.layers],
        "tokens": [r.token for r in first + second],
        "after_load": [r.token for r in again],
        "without_load": [r.token for r in kept],
        "logprobs": np.array(first[0].logprobs).tolist(),
    }


def main() -> None:
    model_path, out, length = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    joined = distributed.join()
    model, tokenizer = lazymlx.load(model_path, group=joined)
    prompt = np.random.default_rng(0).integers(3, 250, size=length).tolist()
    variants = sys.argv[4].split(",") if len(sys.argv) > 4 else list(VARIANTS)
    result = {name: run(model, tokenizer, prompt, name, out) for name in variants}
    (out / f"rank{collectives.rank()}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
