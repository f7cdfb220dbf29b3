"""Context-parallel prompt steps (lazymlx/parallel/context_parallel.py): the pieces in one process, then
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
from types import SimpleNamespace

import numpy as np
import pytest
from test_distributed import BIN, Launch, complete, error_lines, on_linux, serving

from lazymlx import LazyConfig
from lazymlx.models.registry import DEFAULT_MODEL
from lazymlx.models.tiny import write_tiny_model
from lazymlx.parallel.chain import STALL_LAYERS, Chain, Plan
from lazymlx.parallel.costs import partition, weighted_costs
from lazymlx.parallel.distributed import free_ports
from lazymlx.parallel.watchdog import Watchdog

WORKER = Path(__file__).parent / "context_parallel_worker.py"
CONFIGS = "keep-all,pruning,static,mass,point"


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
    plan = Plan(np.arange(300) + 5, [0, 150, 240, 300], 64, 8, [3, 7], 1234)
    again = Plan.decode(plan.encode())
    assert again.tokens.tolist() == plan.tokens.tolist()
    assert (again.bounds, again.chunk, again.window, again.decisions, again.layer_ms) == (
        plan.bounds,
        64,
        8,
        [3, 7],
        1234,
    )


def test_a_steps_stall_deadline_grows_with_its_prompts_layer():
    """Four whole first layers as rank 0 models them, never under the floor."""
    chain = Chain(SimpleNamespace(rank=lambda: 1, size=lambda: 3), Watchdog(60.0))
    assert chain.deadline() == 60.0  # no step yet: the floor
    chain.plan = Plan(np.arange(300), [0, 100, 200, 300], 64, 8, [], layer_ms=2_000)
    assert chain.deadline() == 60.0  # 8 s modelled: the floor
    chain.plan.layer_ms = 50_000
    assert chain.deadline() == STALL_LAYERS * 50.0 == 200.0


# real chains on loopback


@pytest.fixture(scope="module")
def six_layers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random model deep enough for two pruning layers and layers between them."""
    return write_tiny_model(tmp_path_factory.mktemp("cp") / "tiny-6", num_layers=6)


def worker_run(
    ranks: int, model: Path | str, out: Path, prompt: int | str, timeout: float, configs=CONFIGS
) -> dict:
    out.mkdir()
    command = [sys.executable, str(WORKER), str(model), str(out), str(prompt), configs]
    _, err = Launch(ranks, *command).finish(timeout)
    assert (out / "rank0.json").exists(), err
    return json.loads((out / "rank0.json").read_text())


def assert_same_context(alone: Path, chain: Path, name: str, tolerance: float = 1e-4) -> None:
    """Rows per layer, depths, ids equal; keys, values and Aux slots within fp32 rounding
    (`tolerance`, relative to the largest value where that is over 1)."""
    one, other = np.load(alone / f"{name}.npz"), np.load(chain / f"{name}.npz")
    assert sorted(one.files) == sorted(other.files), name
    for key in one.files:
        if key[0] in "pd" or key == "ids":
            assert np.array_equal(one[key], other[key]), (name, key)
        else:
            assert one[key].shape == other[key].shape, (name, key)
            scale = max(1.0, float(np.abs(one[key]).max(initial=0.0)))
            assert np.abs(one[key] - other[key]).max() < tolerance * scale, (name, key)


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [2, 3])
def test_a_chain_builds_the_context_one_process_builds(six_layers, tmp_path, ranks):
    """For keep-all, attention pruning (with revival in decode), static ranking, a mass rule and
    a first cut placed by pointing: the same greedy tokens (and a second turn, on rank 0 alone), the same
    positions computed per layer, the same rows, depths and Aux slots as one process."""
    alone = worker_run(0, six_layers, tmp_path / "one", 500, 60)
    chain = worker_run(ranks, six_layers, tmp_path / "chain", 500, 180)
    for name in CONFIGS.split(","):
        mine, theirs = chain[name], alone[name]
        assert mine["tokens"] == theirs["tokens"] and mine["turn"] == theirs["turn"], name
        if name != "keep-all":  # stock's forward pass leaves the last token to the first decode
            assert mine["record"] == theirs["record"], name
        gap = np.abs(np.array(mine["logprobs"]) - np.array(theirs["logprobs"])).max()
        assert gap < 1e-4, (name, gap)
        assert_same_context(tmp_path / "one", tmp_path / "chain", name)
    for name in ("pruning", "point"):
        depths = np.load(tmp_path / "chain" / f"{name}.npz")["depths"]
        assert depths.min() < depths.max() == 6, name  # it did prune


@pytest.mark.real_model
@pytest.mark.slow
def test_smollm2_on_a_chain_of_two_prunes_as_one_process(real, tmp_path):
    """SmolLM2-135M, a 600-token passkey prompt, its `fast` preset (it prunes every prompt past
    256 tokens; the default's mass rule runs this one whole, as it does at 512): the same
    tokens, second turn, rows per layer and depths as one process, KV and Aux within rounding."""
    prompt = "passkey:600"
    alone = worker_run(0, DEFAULT_MODEL, tmp_path / "one", prompt, 60, "fast")["fast"]
    chain = worker_run(2, DEFAULT_MODEL, tmp_path / "chain", prompt, 120, "fast")["fast"]
    assert chain["tokens"] == alone["tokens"] and chain["turn"] == alone["turn"]
    assert chain["record"] == alone["record"]
    assert_same_context(tmp_path / "one", tmp_path / "chain", "fast", 1e-4)
    depths = np.load(tmp_path / "chain" / "fast.npz")["depths"]
    assert depths.min() < depths.max() == 30  # it did prune


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


@on_linux
@pytest.mark.slow
def test_a_stalled_middle_rank_ends_every_other_rank_within_the_deadline(six_layers, tmp_path):
    """Three ranks; the chain's middle rank (rank 2: 1 → 2 → 0) stops itself (SIGSTOP) at layer
    3 of the prompt step, a pruning layer, its connections open. With a 3 s deadline the other
    two end within seconds, one line each, rank 0's naming what it waited for and from whom;
    the stopped rank is the test's to kill."""
    (tmp_path / "chain").mkdir()
    command = [sys.executable, str(WORKER), str(six_layers), str(tmp_path / "chain"), "500"]
    env = {"LAZYMLX_STALL_TIMEOUT": "3", "CP_TEST_STALL": "2:3"}
    launch = Launch(3, *command, "pruning", env=env)
    try:
        stopped = _when(lambda: _state(launch.ranks().get(2)) == "T", 120)
        pids, started = launch.ranks(), time.monotonic()
        _when(lambda: all(_state(pids.get(rank)) in (None, "Z") for rank in (0, 1)), 30)
        took = time.monotonic() - started
        with contextlib.suppress(KeyError, ProcessLookupError):
            os.kill(pids[2], signal.SIGKILL)
        _, err = launch.finish(30)
    finally:
        launch.end()  # the whole process group, the stopped rank too if it is still there
    assert stopped and took < 15, (took, err)
    assert "Traceback" not in err, err
    ours = re.findall(
        r"error: rank (\d) on \S+ (waited 3 s for|lost the connection|was stopped)", err
    )
    assert sorted(rank for rank, _ in ours) == ["0", "1"] and err.count("error:") == 2, err
    assert re.search(
        r"error: rank 0 on \S+ waited 3 s for the keys and values of layer 3 from rank 2: ", err
    ), err


@on_linux
@pytest.mark.slow
def test_a_chain_idle_past_the_stall_deadline_still_serves(six_layers):
    """The wait for rank 0's next prompt is idle by design and has no deadline: with a 2 s one,
    a server whose chain sat idle longer answers two long prompts (each on the chain) and stops
    cleanly."""
    port = free_ports(1)
    command = [str(BIN / "lazymlx"), "serve", "-m", str(six_layers), "--port", str(port)]
    env = {"LAZYMLX_STALL_TIMEOUT": "2"}
    launch = Launch(2, *command, "--parallel", "context", env=env)
    try:
        url = serving(launch, port)
        replies = []
        for prompt in ("the cat sat on the mat ", "a dog ran in the park "):
            time.sleep(4)  # idle, past the deadline
            replies.append(complete(url, prompt=prompt * 50, max_tokens=4))
        os.kill(launch.ranks()[0], signal.SIGINT)  # Ctrl-C: rank 0 stops, and tells rank 1
        _, err = launch.finish(60)
    finally:
        launch.end()
    assert all(reply["usage"]["completion_tokens"] >= 1 for reply in replies), replies
    assert not any(line.startswith("error") for line in error_lines(err)), err


def _state(pid: int | None) -> str | None:
    """A process's state letter (R, S, T stopped, Z ended), None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, TypeError):
        return None


def _when(condition, timeout: float) -> bool:
    """Whether `condition()` came true within `timeout` seconds (polled every 0.1 s)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


def _quietly(ask, *args, **kwargs) -> None:
    with contextlib.suppress(OSError):
        ask(*args, **kwargs)


def test_what_the_chain_cannot_run_is_refused_with_one_line(monkeypatch):
    from lazymlx.errors import LazymlxError
    from lazymlx.parallel import context_parallel

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


# lazymlx bench --parallel


BENCH_REFUSALS = [
    (["--parallel", "sideways"], "--parallel is tensor or context, got 'sideways'"),
    (["--parallel", "context", "--lazy", "none"], "bench --parallel context times presets"),
    (["--parallel", "context", "-l", "100"], "a 100-token prompt is too short for a chain of 2"),
    (["--parallel", "context", "--lazy", "gentle,off"], "--lazy off is stock mlx-lm, which"),
]


@pytest.mark.parametrize("argv, message", BENCH_REFUSALS)
def test_a_bench_a_chain_cannot_time_is_one_error_line(monkeypatch, capsys, argv, message):
    from lazymlx.cli.app import main
    from lazymlx.parallel import collectives, distributed

    monkeypatch.setenv("MLX_RANK", "0")
    monkeypatch.setattr(distributed, "join", lambda: None)
    monkeypatch.setattr(
        collectives, "group", lambda: SimpleNamespace(size=lambda: 2, rank=lambda: 0)
    )
    with pytest.raises(SystemExit) as exited:
        main(["bench", "-m", "smollm2-135m", *argv])
    err = capsys.readouterr().err
    assert exited.value.code == 1 and err.startswith(f"error: {message}"), err
    assert len(err.strip().splitlines()) == 1


def test_bench_on_a_chain_outside_mlx_launch_is_one_error_line(monkeypatch, capsys):
    from lazymlx.cli.app import main

    monkeypatch.delenv("MLX_RANK", raising=False)
    with pytest.raises(SystemExit) as exited:
        main(["bench", "-m", "smollm2-135m", "--parallel", "context"])
    err = capsys.readouterr().err
    assert exited.value.code == 1 and len(err.strip().splitlines()) == 1
    assert err.startswith("error: bench --parallel context times a chain of ranks beside one")
    assert "under mlx.launch with 2 or more ranks" in err


# fast: the built-in default's 1,024-token floor would run a 600-token prompt whole
BENCH = ["-l", "600", "--lazy", "fast,keep-all", "-n", "3", "-r", "1", "--output", "json"]


def bench_errors(err: str) -> list[str]:
    """error_lines less bench's progress lines off a terminal ('[3/10] 600 tokens, ...')."""
    return [line for line in error_lines(err) if not re.match(r"\[\d+/\d+\] ", line)]


@pytest.mark.slow
def test_bench_on_a_chain_times_each_preset_beside_one_process(six_layers):
    """Rank 0 alone writes one table: stock, then each preset on rank 0 alone and on the chain,
    the chain's answers one process's; every rank ends with the run."""
    command = [str(BIN / "lazymlx"), "bench", "-m", str(six_layers), *BENCH]
    out, err = Launch(2, *command, "--parallel", "context").finish(240)
    assert bench_errors(err) == [] and "[10/10] " in err, err
    data = json.loads(out)
    assert data["parallel"].startswith("context: each preset on rank 0 alone and on a chain of 2")
    rows = data["rows"]
    modes = ["lazy:fast", "lazy:fast on 2 ranks", "lazy:keep-all", "lazy:keep-all on 2 ranks"]
    assert [row["mode"] for row in rows] == ["baseline", *modes]
    assert [row["ranks"] for row in rows] == [1, 1, 2, 1, 2]
    for alone, chained in (rows[1:3], rows[3:5]):
        assert chained["same_as_one_process"] and alone["same_as_one_process"] is None
        assert chained["compute_fraction"] == alone["compute_fraction"]
        assert chained["vs_one_process"] == pytest.approx(alone["ttft_s"] / chained["ttft_s"])
    assert rows[1]["compute_fraction"] < 1 == rows[3]["compute_fraction"]  # fast prunes


@pytest.mark.slow
def test_bench_under_mlx_launch_in_tensor_mode_splits_the_model(tiny_model_dir):
    command = [str(BIN / "lazymlx"), "bench", "-m", str(tiny_model_dir), *BENCH]
    out, err = Launch(2, *command, "--parallel", "tensor").finish(240)
    assert bench_errors(err) == [], err
    data = json.loads(out)
    assert data["parallel"] == "tensor: the model split over 2 ranks, every row"
    assert [row["mode"] for row in data["rows"]] == ["baseline", "lazy:fast", "lazy:keep-all"]
    assert data["rows"][2]["answer_matches_baseline"]


@pytest.mark.slow
def test_a_prompt_too_short_for_the_chain_ends_every_rank_with_one_line(six_layers):
    command = [str(BIN / "lazymlx"), "bench", "-m", str(six_layers), "-l", "100"]
    out, err = Launch(2, *command, "--parallel", "context").finish(120)
    assert out == ""
    assert error_lines(err) == [
        "error: a 100-token prompt is too short for a chain of 2 ranks, which runs prompts of "
        "at least 128 tokens (64 a rank); pass a longer --prompt-len"
    ]
