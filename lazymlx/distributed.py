"""One model across several processes and machines: tensor parallelism on MLX's distributed engine.

`mlx.launch` starts one process per rank (MLX_RANK and the backend's settings in its environment).
Every rank loads the model and keeps its share of each block's query/KV heads and MLP columns
(mlx-lm's own `model.shard(group)`); the sharded output projections sum across the group, so
hidden states, logits and everything decided from them come out the same on every rank. Rank 0
does all I/O (prints, files, HTTP) and the others follow it: every rank runs the same command on
the same inputs, so all enter each collective in the same order, and what only rank 0 knows (a
file's contents, an HTTP request, a client gone) is handed to the others here.

Every rank must evaluate every collective, in the same order: each helper here evaluates its
own at once rather than leaving them in a lazy graph that only some ranks would ever read.

A process that is not under mlx.launch (or is alone in its group) never joins one: everything
here then does what one process does.
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import mlx.core as mx
import mlx.nn as nn
import mlx_lm.models.cache as mlx_lm_cache
import numpy as np

from lazymlx.errors import LazymlxError, RankError

T = TypeVar("T")
RANK_ENV = "MLX_RANK"  # set by mlx.launch on every process it starts
CONNECT_TIMEOUT_ENV = "LAZYMLX_CONNECT_TIMEOUT"
CONNECT_TIMEOUT_S = 60.0
GROUP_SIZE = "group_size"  # context files: how many ranks saved them
BACKEND_PREFIXES = ("[ring]", "[jaccl]", "[mpi]", "[nccl]")  # MLX's backends' own messages

_group: mx.distributed.Group | None = None


def group() -> mx.distributed.Group | None:
    """The group this process's model is sharded over; None in one process."""
    return _group


def rank() -> int:
    return 0 if _group is None else _group.rank()


def size() -> int:
    return 1 if _group is None else _group.size()


def join() -> mx.distributed.Group | None:
    """Join the group mlx.launch started (once); None when this process is alone in it.

    MLX's init waits for every peer without a time limit and holds Python's lock while it waits,
    so no thread of this process could give up: a watchdog process does, after
    LAZYMLX_CONNECT_TIMEOUT seconds (60 by default), with one error line.
    """
    global _group
    if _group is not None or RANK_ENV not in os.environ:
        return _group  # joined already, or not started by mlx.launch
    hostfile = os.environ.get("MLX_HOSTFILE")
    if hostfile and not Path(hostfile).read_text().strip():
        return None  # `mlx.launch -n 1`: a group of one is one process
    try:
        seconds = float(os.environ.get(CONNECT_TIMEOUT_ENV, CONNECT_TIMEOUT_S))
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise LazymlxError(
            f"{CONNECT_TIMEOUT_ENV} must be a number of seconds > 0, "
            f"got {os.environ[CONNECT_TIMEOUT_ENV]!r}"
        )
    me = os.environ[RANK_ENV]
    late = (
        f"error: rank {me} on {socket.gethostname()}: the group did not form within "
        f"{seconds:g} s: a rank never started or cannot reach the others (check each host's IP "
        f"and that the ports mlx.launch uses are open), or set {CONNECT_TIMEOUT_ENV} to wait longer"
    )
    with _deadline(seconds, late):
        try:
            joined = mx.distributed.init(strict=True)
        except RuntimeError as error:
            raise LazymlxError(
                f"cannot join the group mlx.launch started ({error}); check --hosts or "
                "--hostfile and --backend"
            ) from None
    if joined.size() > 1:
        _group = joined
        _drop_backend_lines()
        signal.signal(signal.SIGTERM, _stopped)
    return _group


def free_ports(count: int) -> int:
    """The first of `count` consecutive ports free on loopback, for `mlx.launch --starting-port`
    (the ring binds one per rank); drawn at random so launches side by side rarely collide."""
    for _ in range(100):
        first = random.randint(20_000, 60_000)
        try:
            for port in range(first, first + count):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        return first
    raise RuntimeError("no free ports on loopback")


def _stopped(signum: int, frame: object) -> None:
    """mlx.launch ends every rank (SIGTERM) once one fails: say so in this rank's one line."""
    where = f"rank {rank()} on {socket.gethostname()}"
    fail(RankError(f"{where} was stopped: mlx.launch ends every rank when one fails (see above)"))


@contextmanager
def _deadline(seconds: float, message: str) -> Iterator[None]:
    """Kill this process with `message` on stderr unless the block ends within `seconds`.

    A process, not a thread: the block may hold Python's lock the whole time. The watchdog waits
    on a pipe that closes when the block ends (or this process dies) and then exits itself.
    """
    watch = (
        "import os, select, signal, sys\n"
        "if not select.select([sys.stdin], [], [], float(sys.argv[2]))[0]:\n"
        "    sys.stderr.write(sys.argv[3] + '\\n')\n"
        "    sys.stderr.flush()\n"
        "    os.kill(int(sys.argv[1]), signal.SIGKILL)\n"
    )
    command = [sys.executable, "-S", "-c", watch, str(os.getpid()), str(seconds), message]
    watchdog = subprocess.Popen(command, stdin=subprocess.PIPE)
    try:
        yield
    finally:
        watchdog.stdin.close()
        watchdog.wait()


def _drop_backend_lines() -> None:
    """When a peer goes away, MLX's ring backend writes a dozen lines to stderr ("[ring] Socket 5
    was closed by the peer", ...) before the error the CLI reports in one line; keep them out.

    C-level writes to stderr go through a pipe that a thread forwards, those lines dropped.
    Python's own stderr writes to the real one directly, so a last error line before the process
    ends is never left in the pipe.
    """
    real = os.dup(2)
    read, write = os.pipe()
    os.dup2(write, 2)
    os.close(write)
    stream = os.fdopen(real, "w", buffering=1, closefd=False)
    if sys.stderr is sys.__stderr__:
        sys.stderr = stream
    sys.__stderr__ = stream  # where a rank whose other output is silenced writes its own errors

    def forward() -> None:
        with os.fdopen(read, "rb") as lines:
            for line in lines:
                if not line.decode(errors="replace").startswith(BACKEND_PREFIXES):
                    os.write(real, line)

    threading.Thread(target=forward, name="lazymlx-stderr", daemon=True).start()


def check_shardable(model: nn.Module, ranks: int) -> None:
    """Refuse a group size the model can't be split by, naming the sizes that work."""
    args = getattr(model, "args", None)
    kind = getattr(args, "model_type", type(model).__name__)
    if not hasattr(model, "shard"):
        raise LazymlxError(
            f"mlx-lm has no tensor parallelism for {kind} models; run this model in one process"
        )
    heads = getattr(args, "num_attention_heads", None)
    dims = {
        "{} attention heads": heads,
        "{} KV heads": getattr(args, "num_key_value_heads", None) or heads,
        "an MLP width of {}": getattr(args, "intermediate_size", None),
    }
    dims = {name: count for name, count in dims.items() if isinstance(count, int)}
    if all(count % ranks == 0 for count in dims.values()):
        return
    common = math.gcd(*dims.values())
    works = [str(n) for n in range(1, common + 1) if common % n == 0]
    shape = ", ".join(name.format(count) for name, count in dims.items())
    raise LazymlxError(
        f"a group of {ranks} cannot split this model evenly ({shape}); groups that work: "
        f"{' or '.join(works)} ranks"
    )


def everywhere(work: Callable[[], T], what: str, joined: mx.distributed.Group | None = None) -> T:
    """`work()` on every rank of the group (this process's, or `joined`), failing on every rank
    if it failed on any.

    An error every rank met (a bad model name) is rank 0's to report, once; one that only some
    ranks met (a file missing on one machine) is each of theirs (RankError), and rank 0 says who
    failed. Otherwise a rank failing alone would leave the others waiting in the next collective.
    """
    joined = joined or _group
    if joined is None:
        return work()
    try:
        result, error = work(), None
    except LazymlxError as caught:
        result, error = None, caught
    flags = mx.distributed.all_gather(mx.array([int(error is not None)]), group=joined)
    failed = [r for r, bad in enumerate(flags.tolist()) if bad]
    if not failed:
        return result
    if len(failed) == joined.size():
        raise error
    if error is not None:
        raise RankError(f"rank {joined.rank()} on {socket.gethostname()}: {error}")
    names = ", ".join(map(str, failed))
    raise LazymlxError(
        f"rank{'s' * (len(failed) > 1)} {names} could not {what} (its error is on the lines "
        "above); every rank needs it"
    )


def shard(model: nn.Module, joined: mx.distributed.Group) -> None:
    """Split the model's blocks over the group with mlx-lm's own `shard`, and make every rank
    draw the same random numbers (sampling), rank 0's seed."""
    global _group
    check_shardable(model, joined.size())
    model.shard(joined)
    mx.eval(model.parameters())
    _group = joined
    seed = random.getrandbits(31) if joined.rank() == 0 else 0
    mx.random.seed(mx.distributed.all_sum(mx.array(seed), group=joined).item())


def _stream() -> mx.Stream:
    """Where control messages go: mlx-lm's generation stream, after the model's own collectives,
    so a message never overtakes a decode step still in flight on the wire."""
    from mlx_lm.generate import generation_stream

    return generation_stream


def share(message: Any = None) -> Any:
    """Rank 0's JSON-able `message`, on every rank (the others pass nothing)."""
    if _group is None:
        return message
    leader = _group.rank() == 0
    data = json.dumps(message).encode() if leader else b""
    count = mx.distributed.all_sum(mx.array(len(data)), group=_group, stream=_stream()).item()
    buffer = mx.array(np.frombuffer(data, np.uint8)) if leader else mx.zeros((count,), mx.uint8)
    received = mx.distributed.all_sum(buffer, group=_group, stream=_stream())
    return json.loads(np.array(received).tobytes())


def anyone(flag: bool) -> bool:
    """Whether `flag` is set on any rank: how ranks stop together (rank 0's client went away)."""
    if _group is None:
        return flag
    total = mx.distributed.all_sum(mx.array(int(flag)), group=_group, stream=_stream())
    return total.item() > 0


def smallest(value: float) -> float:
    """The smallest of every rank's `value`, so all decide alike (the memory one machine has)."""
    if _group is None:
        return value
    return mx.distributed.all_min(mx.array(float(value)), group=_group, stream=_stream()).item()


def on_leader(function: Callable[..., T], *args: Any, shared: bool = False) -> T | None:
    """`function(*args)` on rank 0 only (files, sockets), its LazymlxError raised on every rank.

    Returns its result on rank 0 and None on the others, or, with `shared`, its (JSON-able)
    result on every rank.
    """
    if _group is None:
        return function(*args)
    leader = _group.rank() == 0
    result, error = None, None
    if leader:
        try:
            result = function(*args)
        except LazymlxError as caught:
            error = caught
    outcome = share({"error": error and str(error), "result": result if shared else None})
    if outcome["error"] is not None:
        raise error or LazymlxError(outcome["error"])
    return result if leader else outcome["result"]


def whole_heads(
    entries: list[Any], metadata: dict[str, str] | None
) -> tuple[list[Any], dict[str, str] | None]:
    """A group's context as one file holds it: each KV cache with every rank's heads (rank order
    is head order, so the layout one process has), and the group's size in the metadata.

    Every rank must call it (it gathers); rank 0 writes what it returns.
    """
    if _group is None:
        return entries, metadata
    joined = []
    for entry in entries:
        state = [_gathered(item) for item in entry.state]
        joined.append(type(entry).from_state(state))
    return joined, {**(metadata or {}), GROUP_SIZE: str(_group.size())}


def _gathered(item: Any) -> Any:
    if not isinstance(item, mx.array) or item.ndim != 4:  # (batch, heads, rows, dim) is sharded
        return item
    parts = mx.distributed.all_gather(item, group=_group, stream=_stream())
    mx.eval(parts)  # now, on every rank: only rank 0 ever reads the result
    return parts.reshape(1, -1, *item.shape[2:])


def read_context(
    read: Callable[[], tuple[list[Any], dict[str, str]]], path: Path
) -> tuple[list[Any], dict[str, str]]:
    """A context file's caches and metadata, read by rank 0 (`read`) and handed to every rank, each
    KV cache with this rank's heads; a file saved by a group of another size is refused."""
    if _group is None:
        entries, metadata = read()
        _check_group_size(metadata, path)
        return entries, metadata
    loaded = on_leader(read)
    layout = None
    if loaded is not None:  # rank 0
        entries, metadata = loaded
        layout = {
            "metadata": metadata,
            "classes": [type(entry).__name__ for entry in entries],
            "states": [[_describe(item) for item in entry.state] for entry in entries],
        }
    layout = share(layout)
    _check_group_size(layout["metadata"], path)
    mine = []
    for index, (name, described) in enumerate(
        zip(layout["classes"], layout["states"], strict=True)
    ):
        state = []
        for position, item in enumerate(described):
            if "shape" not in item:
                state.append(item["value"])
                continue
            own = loaded[0][index].state[position] if loaded is not None else None
            state.append(_heads_of_mine(_broadcast(own, item)))
        mine.append(getattr(mlx_lm_cache, name).from_state(state))
    return mine, layout["metadata"]


def _describe(item: Any) -> dict[str, Any]:
    if isinstance(item, mx.array):
        return {"shape": item.shape, "dtype": str(item.dtype).rsplit(".", 1)[-1]}
    return {"value": item}


def _broadcast(array: mx.array | None, described: dict[str, Any]) -> mx.array:
    shape, dtype = tuple(described["shape"]), getattr(mx, described["dtype"])
    if math.prod(shape) == 0:
        return mx.zeros(shape, dtype)
    mine = array if array is not None else mx.zeros(shape, dtype)
    received = mx.distributed.all_sum(mine, group=_group, stream=_stream())
    mx.eval(received)  # now, on every rank, in the same order
    return received


def _heads_of_mine(array: mx.array) -> mx.array:
    if array.ndim != 4:
        return array
    count = array.shape[1] // _group.size()
    return array[:, _group.rank() * count : (_group.rank() + 1) * count]


def _check_group_size(metadata: dict[str, str], path: Path) -> None:
    saved = metadata.get(GROUP_SIZE, "1")
    if saved == str(size()):
        return
    if saved == "1":
        raise LazymlxError(f"{path} holds the context of one process; load it without mlx.launch")
    raise LazymlxError(
        f"{path} holds the context of a group of {saved} ranks; load it in a group of {saved} "
        f"(mlx.launch with {saved} ranks)"
    )


def fail(error: BaseException) -> None:
    """End this rank now, with one error line: its group can't go on (a rank gone, a step that
    failed here alone), and every other rank sees its connection to this one drop."""
    where = f"rank {rank()} on {socket.gethostname()}"
    if isinstance(error, RankError):
        line = str(error)
    elif str(error).startswith(BACKEND_PREFIXES):  # what a backend raises when a peer is gone
        line = (
            f"{where} lost the connection to another rank ({error}): a rank stopped or the "
            "network dropped, so every rank stops"
        )
    else:
        line = f"{where} failed: {error!r}"
    sys.__stderr__.write(f"error: {line}\n")
    sys.__stderr__.flush()
    os._exit(1)
