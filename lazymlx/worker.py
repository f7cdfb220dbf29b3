"""The generation thread: one long-lived thread that runs MLX work for every other thread.

Measured here (MLX 0.32 on Linux, CPU backend, with and without OpenBLAS): a thread that
evaluates MLX arrays and then ends makes the process abort at exit ("terminate called without
an active exception", rc 134) in about a third of runs, while a thread still alive at exit never
does. On Metal, MLX streams belong to the thread that made them. So work from threads that come
and go (an app's workers, a web server's pool) is handed to this one daemon thread, which never
ends; the main thread runs its own work directly (its end is the process's end).

When no job is queued the thread does idle work (completing kept contexts, lazymlx/engine/complete.py)
one short unit at a time, looking at the queue between units: a job never waits for more than
the unit in progress, and jobs still run in the order they were submitted.

At interpreter exit the thread is parked (`park`, run by atexit): it finishes the unit or job in
progress (a request sees `exiting` and stops at its next token or layer) and then waits forever,
outside MLX. A daemon thread still inside MLX when the interpreter finalizes is torn down through
C++ frames and aborts the process (rc 134): every script using `LLM` did, ending while idle
completion ran.
"""

from __future__ import annotations

import atexit
import queue
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")
_END = object()
IdleWork = Callable[[], bool]  # one unit of work; whether more is left


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class GenerationThread:
    """Runs submitted jobs one at a time, in order, on one daemon thread started on first use."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()
        self._idle: list[IdleWork] = []
        self._unit = threading.Lock()  # held while a unit of idle work runs
        self._exiting = threading.Event()  # the interpreter is exiting: take no more work
        self._parked = threading.Event()  # the thread is waiting outside MLX for good
        self.idle_units = 0  # units of idle work run (for stats and tests)

    def when_idle(self, work: IdleWork) -> None:
        """Run `work()` (one short unit per call, returning whether more is left) whenever no
        job is queued; it is called again after every job, since a job may leave new work."""
        self._idle.append(work)

    def stop_idle(self, work: IdleWork) -> None:
        """Run no more units of `work`; from another thread, also wait for the unit in progress,
        so whatever `work` touches is free once this returns."""
        if work in self._idle:
            self._idle.remove(work)
        if not self.is_current():
            with self._unit:
                pass

    @property
    def exiting(self) -> bool:
        """Whether the interpreter is exiting: a job should stop at its next step."""
        return self._exiting.is_set()

    def submit(self, job: Callable[[], None]) -> None:
        with self._start:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="lazymlx-generation", daemon=True
                )
                self._thread.start()
                atexit.register(self.park)
        self._jobs.put(job)

    def park(self, timeout: float = 60.0) -> None:
        """Stop taking work and wait (up to `timeout` seconds) for the job or unit in progress,
        so that no MLX work is running on this thread when the interpreter finalizes."""
        self._exiting.set()
        self._jobs.put(lambda: None)  # wakes a thread waiting for a job
        if not self._parked.wait(timeout):
            print(
                f"lazymlx: the generation thread was still busy after {timeout:.0f} s at exit",
                file=sys.stderr,
            )

    def is_current(self) -> bool:
        return threading.current_thread() is self._thread

    def _run(self) -> None:
        busy = list(self._idle)  # idle work that may have units left
        while not self.exiting:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                if busy:
                    busy = self._idle_unit(busy)
                    continue
                job = self._jobs.get()
            if self.exiting:
                break
            job()  # jobs report their own errors
            busy = list(self._idle)
        self._parked.set()
        threading.Event().wait()  # never ends: a thread that ends after MLX work aborts the exit

    def _idle_unit(self, busy: list[IdleWork]) -> list[IdleWork]:
        """One unit of the first idle work with units left; the ones that may have more."""
        work = busy[0]
        with self._unit:
            if work not in self._idle:  # stopped since the last job
                return busy[1:]
            try:
                more = work()
            except Exception as error:  # idle work must never take the generation thread down
                warnings.warn(f"idle work stopped: {error}", RuntimeWarning, stacklevel=1)
                more = False
            self.idle_units += 1
        return busy if more else busy[1:]

    def call(self, function: Callable[[], T]) -> T:
        """Run `function` on the generation thread and wait for its result (or its error)."""
        return next(iter(self.relay(lambda: iter([function()]))))

    def relay(self, make: Callable[[], Iterator[Any]]) -> Iterator[Any]:
        """Iterate `make()` on the generation thread, handing each item to the caller's thread.

        The caller may stop early (break, close): the job then stops at its next item, so the
        generation thread is free for the next job.
        """
        items: queue.SimpleQueue = queue.SimpleQueue()
        stop = threading.Event()

        def job() -> None:
            try:
                for item in make():
                    items.put(item)
                    if stop.is_set() or self.exiting:
                        break
            except BaseException as error:
                items.put(_Failure(error))
            items.put(_END)

        if self.is_current():  # already on it: run in place
            yield from make()
            return
        self.submit(job)
        try:
            while (item := items.get()) is not _END:
                if isinstance(item, _Failure):
                    raise item.error
                yield item
        finally:
            stop.set()


GENERATION_THREAD = GenerationThread()
