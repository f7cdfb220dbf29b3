"""Context-parallel prompt steps (lazymlx/context_parallel.py): the pieces in one process, then
real chains of 2 and 3 ranks on loopback (mlx.launch, ring backend, free ports) against one
process, and a rank killed mid-step. Every process a test starts is ended by that test."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from test_distributed import BIN, Launch, complete, on_linux, serving

from lazymlx import LazyConfig
from lazymlx.context_parallel import Plan, partition, weighted_costs
from lazymlx.distributed import free_ports
from lazymlx.models.tiny import write_tiny_model

WORKER = Path(__file__).parent / "context_parallel_worker.py"
CONFIGS = "off,pruning,static"


def test_earlier_slices_get_more_tokens_so_every_rank_costs_the_same():
    bounds = partition(8192, 4, token_cost=1.0, pair_cost=1e-3)
    sizes = np.diff(bounds)
    assert bounds[0] == 0 and bounds[-1] == 8192 and sizes.sum() == 8192
    assert list(sizes) == sorted(sizes, reverse=True)

    def cost(a: int, b: int) -> float:
        return (b - a) + 1e-3 * sum(range(a + 1, b + 1))

    costs = [cost(a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    assert max(costs) / min(costs) < 1.01
    assert np.diff(partition(1000, 3, 1.0, 0.0)).tolist() == [333, 334, 333]  # tokens only


def test_pruning_weighs_the_token_term_more():
    config = LazyConfig(schedule=((0.25, 0.5),))
    token, pair = weighted_costs(config, 8, 1.0, 1.0)
    # layers 0-2 whole (layer 2 ranks), 3-7 at half: a half per token, a quarter per pair
    assert token == pytest.approx((3 + 5 * 0.5) / 8) and pair == pytest.approx((3 + 5 * 0.25) / 8)


def test_a_plan_reaches_the_other_ranks_as_it_was():
    plan = Plan(np.arange(300) + 5, [0, 150, 240, 300], 64, 8, [3, 7])
    again = Plan.decode(plan.encode())
    assert again.tokens.tolist() == plan.tokens.tolist()
    assert (again.bounds, again.chunk, again.window, again.decisions) == (
        plan.bounds,
        64,
        8,
        [3, 7],
    )


# real chains on loopback


@pytest.fixture(scope="module")
def six_layers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random model deep enough for two pruning layers and layers between them."""
    return write_tiny_model(tmp_path_factory.mktemp("cp") / "tiny-6", num_layers=6)


def worker_run(ranks: int, model: Path, out: Path, length: int, timeout: float) -> dict:
    out.mkdir()
    command = [sys.executable, str(WORKER), str(model), str(out), str(length), CONFIGS]
    _, err = Launch(ranks, *command).finish(timeout)
    assert (out / "rank0.json").exists(), err
    return json.loads((out / "rank0.json").read_text())


def assert_same_context(alone: Path, chain: Path, name: str) -> None:
    """Rows per layer, depths, ids equal; keys, values and Aux slots within fp32 rounding."""
    one, other = np.load(alone / f"{name}.npz"), np.load(chain / f"{name}.npz")
    assert sorted(one.files) == sorted(other.files), name
    for key in one.files:
        if key[0] in "pd" or key == "ids":
            assert np.array_equal(one[key], other[key]), (name, key)
        else:
            assert one[key].shape == other[key].shape, (name, key)
            assert np.abs(one[key] - other[key]).max() < 1e-4, (name, key)


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [2, 3])
def test_a_chain_builds_the_context_one_process_builds(six_layers, tmp_path, ranks):
    """For keep-all, attention pruning (with revival in decode) and static ranking: the same greedy tokens (and a second turn, on rank 0 alone), the same
    positions computed per layer, the same rows, depths and Aux slots as one process."""
    alone = worker_run(0, six_layers, tmp_path / "one", 500, 60)
    chain = worker_run(ranks, six_layers, tmp_path / "chain", 500, 180)
    for name in CONFIGS.split(","):
        mine, theirs = chain[name], alone[name]
        assert mine["tokens"] == theirs["tokens"] and mine["turn"] == theirs["turn"], name
        if name != "off":  # stock's prefill leaves the last token to the first decode step
            assert mine["record"] == theirs["record"], name
        gap = np.abs(np.array(mine["logprobs"]) - np.array(theirs["logprobs"])).max()
        assert gap < 1e-4, (name, gap)
        assert_same_context(tmp_path / "one", tmp_path / "chain", name)
    depths = np.load(tmp_path / "chain" / "pruning.npz")["depths"]
    assert depths.min() < depths.max() == 6  # it did prune


@on_linux
@pytest.mark.slow
def test_a_killed_middle_rank_ends_every_rank_within_30_s_with_one_line_each(six_layers):
    """Three ranks serving; the chain's middle rank (rank 2: 1 → 2 → 0) is killed while a long
    prompt runs on the chain."""
    port = free_ports(1)
    command = [str(BIN / "lazymlx"), "serve", "-m", str(six_layers), "--port", str(port)]
    launch = Launch(3, *command, "--parallel", "context")
    try:
        url = serving(launch, port)
        body = {"prompt": "the cat sat on the mat " * 50, "max_tokens": 4}
        asking = threading.Thread(target=lambda: _quietly(complete, url, **body), daemon=True)
        asking.start()
        time.sleep(1.0)  # the prompt is on the chain
        os.kill(launch.ranks()[2], signal.SIGKILL)
        started = time.monotonic()
        _, err = launch.finish(30)
        assert time.monotonic() - started < 30
    finally:
        launch.end()
    assert "Traceback" not in err, err
    # mlx.launch's own "[WARN] Node with rank N exited" comes in pieces from several threads and
    # may split a line of ours: find ours by their start
    ours = re.findall(r"error: rank (\d) on \S+ (?:lost the connection|was stopped)", err)
    assert sorted(ours) == ["0", "1"], err
    assert err.count("error:") == 2, err


def _quietly(ask, *args, **kwargs) -> None:
    with contextlib.suppress(OSError):
        ask(*args, **kwargs)


def test_what_the_chain_cannot_run_is_refused_with_one_line(monkeypatch):
    from types import SimpleNamespace

    from lazymlx import context_parallel
    from lazymlx.errors import LazymlxError

    pair = SimpleNamespace(size=lambda: 2, rank=lambda: 0)
    with pytest.raises(LazymlxError, match="at least 2 ranks"):
        context_parallel.join(SimpleNamespace(size=lambda: 1, rank=lambda: 0))
    monkeypatch.setenv("NCCL_HOST_IP", "10.0.0.1")
    with pytest.raises(LazymlxError, match="NCCL backend lacks"):
        context_parallel.join(pair)
    windowed = SimpleNamespace(adapter=SimpleNamespace(windowed=True))
    with pytest.raises(LazymlxError, match="without sliding-window layers"):
        context_parallel.check_model(windowed)
    assert context_parallel.chain() is None
