"""One model across several processes and machines: tensor parallelism on MLX's distributed engine.

`mlx.launch` starts one process per rank (MLX_RANK and the backend's settings in its environment).
Every rank loads the model and keeps its share of each block's query/KV heads and MLP columns
(mlx-lm's own `model.shard(group)`); the sharded output projections sum across the group, so
hidden states, logits and everything decided from them come out the same on every rank. Rank 0
does all I/O (prints, files, HTTP) and the others follow it: every rank runs the same command on
the same inputs, so all enter each collective in the same order, and what only rank 0 knows (a
file's contents, an HTTP request, a client gone) is handed to the others by
lazymlx/parallel/collectives.py. This module joins the group, shards the model, and ends a rank that
cannot go on so that none is left waiting.

A process that is not under mlx.launch (or is alone in its group) never joins one: everything
here then does what one process does.
"""

from __future__ import annotations

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
from typing import TypeVar

import mlx.core as mx
import mlx.nn as nn

from lazymlx.errors import LazymlxError, RankError
from lazymlx.parallel import collectives

T = TypeVar("T")
RANK_ENV = "MLX_RANK"  # set by mlx.launch on every process it starts
CONNECT_TIMEOUT_ENV = "LAZYMLX_CONNECT_TIMEOUT"
CONNECT_TIMEOUT_S = 60.0
BACKEND_PREFIXES = ("[ring]", "[jaccl]", "[mpi]", "[nccl]")  # MLX's backends' own messages
_ending = threading.RLock()  # re-entrant: SIGTERM's handler may run inside fail on its thread
_ender: int | None = None  # the thread that writes this rank's last line


def join() -> mx.distributed.Group | None:
    """Join the group mlx.launch started (once); None when this process is alone in it.

    MLX's init waits for every peer without a time limit and holds Python's lock while it waits,
    so no thread of this process could give up: a watchdog process does, after
    LAZYMLX_CONNECT_TIMEOUT seconds (60 by default), with one error line.
    """
    if collectives.group() is not None or RANK_ENV not in os.environ:
        return collectives.group()  # joined already, or not started by mlx.launch
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
        collectives.set_group(joined)
        _drop_backend_lines()
        signal.signal(signal.SIGTERM, _stopped)
    return collectives.group()


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


def where() -> str:
    """This rank and host, for its error lines (MLX_RANK: a context-parallel group's ranks run
    the engine as one process each, so collectives.rank() is 0 on all of them)."""
    return f"rank {os.environ.get(RANK_ENV, collectives.rank())} on {socket.gethostname()}"


def _stopped(signum: int, frame: object) -> None:
    """mlx.launch ends every rank (SIGTERM) once one fails: say so in this rank's one line."""
    fail(RankError(f"{where()} was stopped: mlx.launch ends every rank when one fails (see above)"))


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
    joined = joined or collectives.group()
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
    check_shardable(model, joined.size())
    model.shard(joined)
    mx.eval(model.parameters())
    collectives.set_group(joined)
    seed = random.getrandbits(31) if joined.rank() == 0 else 0
    mx.random.seed(mx.distributed.all_sum(mx.array(seed), group=joined).item())


def fail(error: BaseException) -> None:
    """End this rank now, with one error line: its group can't go on (a rank gone, a step that
    failed here alone), and every other rank sees its connection to this one drop. Two threads
    ending it at once (a wait's deadline passing as its connection drops) write one line: the
    second waits here for the first's exit."""
    global _ender
    me = threading.get_ident()
    with _ending:
        first = _ender is None
        if first:
            _ender = me
    if not first:
        if _ender == me:  # SIGTERM's handler inside this thread's own fail: that one goes on
            return
        threading.Event().wait()  # another thread writes this rank's line, then ends it
    place = where()
    if isinstance(error, RankError):
        line = str(error)
    elif str(error).startswith(BACKEND_PREFIXES):  # what a backend raises when a peer is gone
        line = (
            f"{place} lost the connection to another rank ({error}): a rank stopped or the "
            "network dropped, so every rank stops"
        )
    else:
        line = f"{place} failed: {error!r}"
    sys.__stderr__.write(f"error: {line}\n")
    sys.__stderr__.flush()
    os._exit(1)
