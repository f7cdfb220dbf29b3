"""Ctrl-C held while a step changes the context, so the context is never half updated."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold Ctrl-C until the block is done, then raise it (main thread only, where it arrives).

    A decode step or a completion unit only takes milliseconds, so holding Ctrl-C costs nothing;
    a prompt step can be long, and rolls back instead (lazymlx/engine/prefill.py).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt
