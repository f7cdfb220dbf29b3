"""Tensor-parallel lazy inference across ranks (lazymlx/parallel/distributed.py).

The fast tests check the pieces in one process; the slow ones run real groups: ranks that
mlx.launch starts on loopback (ring backend, free ports), tiny random models with 2 ranks and
SmolLM2 with 3. Every process a test starts is ended by that test: each launch gets its own
process group, killed when the test is done with it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import mlx.core as mx
import numpy as np
import pytest
from conftest import random_model, random_tokens
from mlx_lm.models.cache import save_prompt_cache

from lazymlx import LazyConfig, LazyState
from lazymlx.cli.app import main
from lazymlx.contexts import Context, load_context, save_context
from lazymlx.engine import hooks
from lazymlx.engine.blocks import attention_probs, attention_scores
from lazymlx.engine.config import PRESETS
from lazymlx.engine.prefill import prompt_step
from lazymlx.engine.presets import save_preset
from lazymlx.errors import LazymlxError, RankError
from lazymlx.llm import Stream, _message, _Request, _shared_request
from lazymlx.models.registry import DEFAULT_MODEL
from lazymlx.parallel import collectives, distributed

BIN = Path(sys.executable).parent
WORKER = Path(__file__).parent / "distributed_worker.py"
on_linux = pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds ranks through /proc")


# one process: the pieces


def test_a_group_size_that_does_not_split_the_model_names_the_sizes_that_work():
    smollm = SimpleNamespace(
        shard=None,
        args=SimpleNamespace(num_attention_heads=9, num_key_value_heads=3, intermediate_size=1536),
    )
    distributed.check_shardable(smollm, 3)
    with pytest.raises(LazymlxError) as refused:
        distributed.check_shardable(smollm, 2)
    assert str(refused.value) == (
        "a group of 2 cannot split this model evenly (9 attention heads, 3 KV heads, an MLP "
        "width of 1536); groups that work: 1 or 3 ranks"
    )
    with pytest.raises(LazymlxError, match="no tensor parallelism for gemma models"):
        distributed.check_shardable(SimpleNamespace(args=SimpleNamespace(model_type="gemma")), 2)


def test_a_rank_that_fails_alone_says_so_and_rank_0_says_who(monkeypatch):
    """An error one rank meets alone (its model files) is its own line; rank 0 names it; an
    error every rank meets is rank 0's one line."""

    def on_rank(rank: int, failed: list[int], work):
        joined = SimpleNamespace(size=lambda: 2, rank=lambda: rank)
        flags = mx.array([int(r in failed) for r in range(2)])
        monkeypatch.setattr(mx.distributed, "all_gather", lambda x, group: flags)
        with pytest.raises(LazymlxError) as raised:
            distributed.everywhere(work, "load the model", joined)
        return raised.value

    def missing():
        raise LazymlxError("no such file or directory: ./m")

    mine = on_rank(1, [1], missing)
    assert isinstance(mine, RankError)
    assert str(mine) == f"rank 1 on {socket.gethostname()}: no such file or directory: ./m"
    theirs = on_rank(0, [1], lambda: None)
    assert str(theirs).startswith("rank 1 could not load the model (its error is on the lines")
    assert not isinstance(theirs, RankError)
    common = on_rank(1, [0, 1], missing)
    assert str(common) == "no such file or directory: ./m" and not isinstance(common, RankError)


def test_pruning_scores_are_reduced_over_every_ranks_heads(monkeypatch):
    """Two ranks, each holding half the heads, reduce to the scores one process ranks."""
    queries = mx.random.normal((1, 8, 3, 16), key=mx.random.key(1))
    keys = mx.random.normal((1, 4, 40, 16), key=mx.random.key(2))
    whole = attention_scores(attention_probs(queries, keys, 0.25))
    sent = []
    monkeypatch.setattr(hooks, "heads_group", lambda: SimpleNamespace(size=lambda: 2))
    monkeypatch.setattr(mx.distributed, "all_sum", lambda x, group: sent.append(x) or x)
    for rank in range(2):  # rank r holds query heads 4r..4r+3 and KV heads 2r..2r+1
        own = attention_probs(queries[:, 4 * rank : 4 * rank + 4], keys[:, 2 * rank : 2 * rank + 2], 0.25)  # fmt: skip
        attention_scores(own)
    assert mx.allclose((sent[0] + sent[1]) / 8, whole, atol=1e-7).item()


def test_a_request_reaches_the_other_ranks_as_rank_0_runs_it():
    request = _Request(
        [5, 6, 7],
        PRESETS["gentle"],
        {"max_tokens": 9, "temp": 0.5, "logit_bias": {12: -3.0}, "seed": 4},
        Stream(),
        None,
        2,
        0.0,
    )
    shared = _shared_request(json.loads(json.dumps(_message(request))))
    assert shared.lazy == request.lazy
    assert (shared.tokens, shared.options, shared.logprobs) == (
        request.tokens,
        request.options,
        request.logprobs,
    )


def test_a_context_file_loads_only_into_a_group_of_the_size_that_saved_it(tmp_path):
    model = random_model(num_layers=4)
    state = LazyState(model)
    prompt_step(state, mx.array(random_tokens(20)), LazyConfig())
    mine = tmp_path / "mine.safetensors"
    save_context(mine, Context(state, list(range(20))), "m", "default")
    assert load_context(mine, model, "m", PRESETS["gentle"])[0].tokens == list(range(20))
    theirs = tmp_path / "theirs.safetensors"
    save_prompt_cache(
        str(theirs), list(state), {"model": "m", "preset": "default", "group_size": "3"}
    )
    with pytest.raises(LazymlxError) as refused:
        load_context(theirs, model, "m", PRESETS["gentle"])
    assert str(refused.value) == (
        f"{theirs} holds the context of a group of 3 ranks; load it in a group of 3 "
        "(mlx.launch with 3 ranks)"
    )


def test_the_head_size_is_the_models_whatever_share_of_heads_a_rank_holds():
    model = random_model()
    whole = LazyState(model).adapter
    for layer in model.model.layers:  # what model.shard does to a group of 2
        layer.self_attn.n_heads //= 2
        layer.self_attn.n_kv_heads //= 2
    half = LazyState(model).adapter
    assert (half.num_heads, half.num_kv_heads, half.head_dim) == (2, 1, whole.head_dim)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["eval"], "`lazymlx eval` runs in one process; run it without mlx.launch"),
        (["generate", "-p", "-"], "under mlx.launch the prompt can't come from stdin"),
        (["chat"], "under mlx.launch the prompt can't come from stdin"),
    ],
)
def test_under_mlx_launch_what_needs_one_process_is_one_error_line(
    monkeypatch, capsys, argv, message
):
    monkeypatch.setenv("MLX_RANK", "0")
    monkeypatch.setattr(distributed, "join", lambda: None)
    monkeypatch.setattr(
        collectives, "group", lambda: SimpleNamespace(size=lambda: 2, rank=lambda: 0)
    )
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 1 and err.startswith(f"error: {message}")
    assert len(err.strip().splitlines()) == 1


# real groups on loopback


class Launch:
    """`mlx.launch` of `ranks` local ranks (or one plain process, ranks=0), in its own process
    group so the test ends every rank it started."""

    def __init__(self, ranks: int, *command: str, env: dict[str, str] | None = None) -> None:
        launch = [str(BIN / "mlx.launch"), "-n", str(ranks), "--backend", "ring"]
        launch += ["--starting-port", str(distributed.free_ports(ranks)), "--"]
        self.process = subprocess.Popen(
            [*(launch if ranks else []), *command],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )

    def finish(self, timeout: float) -> tuple[str, str]:
        try:
            return self.process.communicate(timeout=timeout)
        finally:
            self.end()

    def end(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def ranks(self) -> dict[int, int]:
        """rank → pid of the processes mlx.launch started."""
        found = {}
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and int((entry / "stat").read_text().split()[3]) == (
                    self.process.pid
                ):
                    env = (entry / "environ").read_bytes().split(b"\0")
                    rank = next(v for v in env if v.startswith(b"MLX_RANK="))
                    found[int(rank.split(b"=")[1])] = int(entry.name)
            except (OSError, StopIteration):
                continue
        return found


ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


def error_lines(stderr: str) -> list[str]:
    """Our lines, not mlx.launch's own about each rank's exit ("[WARN] Node with rank 1 exited
    with code 1", printed in pieces from several threads, so sometimes split over lines), nor
    rank 0's dim note that the tiny model's presets were not calibrated on it."""
    theirs = ("[WARN]", "Node with rank", "has no calibrated presets", "is not calibrated")
    lines = [ANSI_ESCAPE.sub("", line) for line in stderr.splitlines()]  # its colours, split too
    return [line for line in lines if line.strip() and not any(t in line for t in theirs)]


@pytest.mark.slow
def test_two_ranks_keep_the_same_tokens_and_answer_as_one_process(tiny_model_dir, tmp_path):
    """Kept tokens, depths, Aux slots and revivals bit-identical on both ranks, for both decode
    policies; greedy tokens (after a save and load too) as one process's, log-probs in fp32
    tolerance."""
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    python = [sys.executable, str(WORKER), str(tiny_model_dir)]
    one = Launch(0, *python, str(tmp_path / "one"), "300").finish(60)
    two = Launch(2, *python, str(tmp_path / "two"), "300").finish(240)
    assert (tmp_path / "two" / "rank1.json").exists(), two[1]
    alone = json.loads((tmp_path / "one" / "rank0.json").read_text())
    ranks = [json.loads((tmp_path / "two" / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0] == ranks[1]
    assert_as_one_process(alone, ranks[0], 1e-4)
    assert one[0] == two[0] == ""


def assert_as_one_process(alone: dict, rank: dict, tolerance: float) -> None:
    for variant, mine in rank.items():
        theirs = alone[variant]
        for key in ("record", "depths", "kv_rows", "tokens", "after_load", "without_load"):
            assert mine[key] == theirs[key], (variant, key)
        assert mine["after_load"] == mine["without_load"]
        gap = np.abs(np.array(mine["logprobs"]) - np.array(theirs["logprobs"])).max()
        assert gap < tolerance, (variant, gap)


@pytest.mark.slow
def test_lazymlx_under_mlx_launch_writes_once_and_saves_a_context_for_its_group(
    tiny_model_dir, tmp_path
):
    context = tmp_path / "context.safetensors"
    generate = [str(BIN / "lazymlx"), "generate", "-m", str(tiny_model_dir), "--raw", "--json"]
    generate += ["--lazy", "gentle"]
    prompt = ["-p", "the cat " * 350, "-n", "6"]  # past the gentle rule's floor: pruned
    alone = json.loads(Launch(0, *generate, *prompt).finish(60)[0])
    out, err = Launch(2, *generate, *prompt, "--prompt-cache-file", str(context)).finish(180)
    assert error_lines(err) == [] and len(out.splitlines()) == 1, err
    group = json.loads(out)
    assert group["text"] == alone["text"] and group["work_share"] < 1
    assert group["work_share"] == alone["work_share"]
    _, refused = Launch(0, *generate, "-p", "x", "--prompt-cache-file", str(context)).finish(60)
    assert error_lines(refused) == [
        f"error: {context} holds the context of a group of 2 ranks; load it in a group of 2 "
        "(mlx.launch with 2 ranks)"
    ]
    more = ["-p", "the cat " * 350 + "sat", "-n", "2", "--prompt-cache-file", str(context)]
    out, err = Launch(2, *generate, *more).finish(180)
    assert error_lines(err) == [] and json.loads(out)["cached_tokens"] > 300, err


@pytest.mark.slow
def test_a_group_size_that_does_not_split_the_model_is_one_error_line(tiny_model_dir):
    command = [str(BIN / "lazymlx"), "generate", "-m", str(tiny_model_dir), "-p", "hi", "--raw"]
    out, err = Launch(3, *command).finish(120)
    assert out == ""
    assert error_lines(err) == [
        "error: a group of 3 cannot split this model evenly (4 attention heads, 2 KV heads, an "
        "MLP width of 128); groups that work: 1 or 2 ranks"
    ]


@pytest.mark.slow
def test_a_rank_that_never_connects_ends_the_others_within_the_timeout(tiny_model_dir, tmp_path):
    first = distributed.free_ports(2)
    hostfile = tmp_path / "hosts.json"
    hostfile.write_text(json.dumps([[f"127.0.0.1:{first}"], [f"127.0.0.1:{first + 1}"]]))
    env = {"MLX_RANK": "0", "MLX_HOSTFILE": str(hostfile), "LAZYMLX_CONNECT_TIMEOUT": "2"}
    command = [str(BIN / "lazymlx"), "generate", "-m", str(tiny_model_dir), "-p", "hi", "--raw"]
    started = time.monotonic()
    launch = Launch(0, *command, env=env)
    _, err = launch.finish(60)
    assert time.monotonic() - started < 30
    assert launch.process.returncode == -signal.SIGKILL
    (line,) = error_lines(err)
    assert line.startswith("error: rank 0 on ") and "the group did not form within 2 s" in line


def serving(launch: Launch, port: int) -> str:
    """The server's URL once it answers."""
    url = f"http://127.0.0.1:{port}"
    for _ in range(240):
        assert launch.process.poll() is None, launch.process.communicate()
        try:
            with urllib.request.urlopen(url + "/health", timeout=1):
                return url
        except OSError:
            time.sleep(0.5)
    raise AssertionError("the server never answered")


def complete(url: str, **body) -> dict:
    request = urllib.request.Request(
        url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as reply:
        return json.loads(reply.read())


def conversation(url: str) -> list[dict]:
    """Sampled with a seed, a request reusing the context of the one before, one cut by a stop
    string (every rank stops at that token), and one more reusing the context."""
    long = {"prompt": "the cat " * 150, "max_tokens": 5, "seed": 3, "temperature": 0.8}
    replies = [complete(url, **long), complete(url, **long)]
    replies.append(complete(url, prompt="the cat", max_tokens=20, stop=["(("]))
    replies.append(complete(url, **long))
    return [(r["choices"][0]["text"], r["choices"][0]["finish_reason"]) for r in replies]


@on_linux
@pytest.mark.slow
def test_serve_under_mlx_launch_answers_as_one_process_and_stops_every_rank(tiny_model_dir):
    """Without idle completion: how much of a kept context it finishes before the next request
    arrives depends on timing, and a group's lockstep units are slower than one process's."""
    untimed = replace(PRESETS["gentle"], complete="never")
    save_preset(str(tiny_model_dir), "no-idle", untimed, {"for": "a test without idle timing"})
    port = distributed.free_ports(1)
    command = [str(BIN / "lazymlx"), "serve", "-m", str(tiny_model_dir), "--port", str(port)]
    command += ["--lazy", "no-idle"]
    launch = Launch(2, *command)
    try:
        group = conversation(serving(launch, port))
        os.kill(launch.ranks()[0], signal.SIGINT)  # Ctrl-C: rank 0 stops, and tells rank 1
        _, err = launch.finish(60)
    finally:
        launch.end()
    assert not any(line.startswith("error") for line in error_lines(err)), err
    alone = Launch(0, *command)
    try:
        assert conversation(serving(alone, port)) == group
    finally:
        alone.end()
    assert group[2][1] == "stop"


@on_linux
@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["mlx.launch", "by hand"])
def test_a_rank_that_dies_ends_the_others_with_one_error_line(tiny_model_dir, tmp_path, launcher):
    """mlx.launch stops the other ranks (they say so); started by hand, rank 0's heartbeat
    notices its lost connection within a beat."""
    port = distributed.free_ports(1)
    command = [str(BIN / "lazymlx"), "serve", "-m", str(tiny_model_dir), "--port", str(port)]
    if launcher == "mlx.launch":
        launches = [Launch(2, *command)]
        serving(launches[0], port)
        victim, survivor = launches[0].ranks()[1], launches[0]
    else:
        first = distributed.free_ports(2)
        hostfile = tmp_path / "hosts.json"
        hostfile.write_text(json.dumps([[f"127.0.0.1:{first}"], [f"127.0.0.1:{first + 1}"]]))
        launches = [
            Launch(0, *command, env={"MLX_RANK": str(rank), "MLX_HOSTFILE": str(hostfile)})
            for rank in range(2)
        ]
        serving(launches[0], port)
        victim, survivor = launches[1].process.pid, launches[0]
    try:
        os.kill(victim, signal.SIGKILL)
        started = time.monotonic()
        _, err = survivor.finish(30)
        assert time.monotonic() - started < 15
    finally:
        for launch in launches:
            launch.end()
    # MLX's ring backend prints its own socket errors from its threads, in interleaved pieces
    # ("[ring] Socket 5 was closed by the peer", "32"): ours is the one error line, no traceback
    assert "Traceback" not in err, err
    ours = [line for line in error_lines(err) if line.startswith("error:")]
    assert len(ours) == 1, err
    (line,) = ours
    assert line.startswith("error: rank 0 on ")
    assert ("was stopped: mlx.launch ends every rank" in line) or ("lost the connection" in line)


@pytest.mark.real_model
@pytest.mark.slow
def test_smollm2_on_three_ranks_keeps_the_same_tokens_and_answers_as_one_process(real, tmp_path):
    (tmp_path / "one").mkdir()
    (tmp_path / "three").mkdir()
    python = [sys.executable, str(WORKER), DEFAULT_MODEL]
    Launch(0, *python, str(tmp_path / "one"), "300", "revive").finish(120)
    _, err = Launch(3, *python, str(tmp_path / "three"), "300", "revive").finish(540)
    assert (tmp_path / "three" / "rank2.json").exists(), err
    alone = json.loads((tmp_path / "one" / "rank0.json").read_text())
    ranks = [json.loads((tmp_path / "three" / f"rank{r}.json").read_text()) for r in range(3)]
    assert ranks[0] == ranks[1] == ranks[2]
    assert_as_one_process(alone, ranks[0], 1e-3)
