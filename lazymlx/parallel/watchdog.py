"""A deadline around each blocking wait on another rank, so a rank that stalls ends the group.

A rank that dies closes its connections, and the ranks waiting on it fail at once. A rank that
stalls with its connections open (a frozen Mac, a cable the OS has not noticed, a process
stopped) leaves them waiting with nothing to fail: MLX's send and receive have no time limit,
and TCP may take many minutes to give up. So a rank arms a deadline before each wait on a peer
(`waiting`) and disarms it after; if the wait outlasts it, a timer thread ends this rank with
one line naming the rank and what it waited for (lazymlx/parallel/distributed.py: fail), and its
neighbours, whose connections to it then close, end in turn.

A thread is enough: MLX releases Python's lock while it evaluates (a receive included), so the
timer runs while the waiting thread is blocked. Arming and disarming take a lock and set two
fields: cheap beside a message. Waits that are idle by design (a follower waiting for rank 0's
next prompt while rank 0 decodes, serves nobody or loads its model) are never armed.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from lazymlx.errors import LazymlxError, RankError
from lazymlx.parallel import distributed

STALL_TIMEOUT_ENV = "LAZYMLX_STALL_TIMEOUT"
# The shortest deadline: a caller scales it up to what it expects a wait to take (the chain: a
# few whole layers of the prompt, lazymlx/parallel/chain.py), so the shortest only has to cover
# what no model of the work sees on a short prompt: a first kernel compilation, a machine
# swapping or busy with other work. A minute, as MLX's own connection waits get.
STALL_TIMEOUT_S = 60.0


def stall_timeout() -> float:
    """LAZYMLX_STALL_TIMEOUT in seconds (60 by default), refused with one line unless > 0."""
    raw = os.environ.get(STALL_TIMEOUT_ENV, str(STALL_TIMEOUT_S))
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise LazymlxError(f"{STALL_TIMEOUT_ENV} must be a number of seconds > 0, got {raw!r}")
    return seconds


class Watchdog:
    """Ends this process with one line when an armed wait outlasts its deadline (never less
    than `shortest` seconds).

    One wait is armed at a time (a rank's chain waits one after another); the timer thread
    starts on the first one and sleeps, outside MLX, whenever nothing is armed.
    """

    def __init__(self, shortest: float) -> None:
        self.shortest = shortest
        self._what: str | None = None  # what the armed wait waits for
        self._seconds = shortest  # its deadline
        self._due = 0.0  # time.monotonic() when it has waited too long
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    @contextmanager
    def waiting(self, what: str, seconds: float | None = None) -> Iterator[None]:
        """Arm a deadline of `seconds` (at least the shortest) for the block: `what` finishes the
        sentence "rank 1 on HOST waited 60 s for ..." (say which rank, which layer or step)."""
        with self._changed:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._watch, name="lazymlx-watchdog", daemon=True
                )
                self._thread.start()
            self._seconds = max(self.shortest, seconds or 0.0)
            self._what, self._due = what, time.monotonic() + self._seconds
            self._changed.notify()
        try:
            yield
        finally:
            with self._changed:
                self._what = None

    def _watch(self) -> None:
        with self._changed:
            while True:
                if self._what is None:
                    self._changed.wait()
                    continue
                left = self._due - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(left)
            what, seconds = self._what, self._seconds
        distributed.fail(
            RankError(
                f"{distributed.where()} waited {_shown(seconds)} s for {what}: a rank stalled "
                f"or the network stopped, so every rank stops (set {STALL_TIMEOUT_ENV} to wait "
                "longer)"
            )
        )


def _shown(seconds: float) -> str:
    return f"{seconds:g}" if seconds < 10 else f"{seconds:.0f}"
