"""The stall deadline (lazymlx/parallel/watchdog.py): armed around a wait, it ends the rank with one line
naming what it waited for; disarmed in time, it does nothing."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from lazymlx.errors import LazymlxError
from lazymlx.parallel import distributed
from lazymlx.parallel.watchdog import STALL_TIMEOUT_ENV, Watchdog, stall_timeout


@pytest.fixture
def failures(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """What the watchdog ends the rank with (`errors`, and `done` set), recorded instead of
    ending the test process."""
    ended = SimpleNamespace(errors=[], done=threading.Event())
    monkeypatch.setattr(distributed, "fail", lambda e: ended.errors.append(e) or ended.done.set())
    return ended


def test_a_wait_past_its_deadline_ends_the_rank_with_what_it_waited_for(failures):
    watchdog = Watchdog(0.2)
    with watchdog.waiting("the keys and values of layer 3 from rank 2"):
        assert failures.done.wait(5)
    (error,) = failures.errors
    assert str(error).startswith(f"{distributed.where()} waited 0.2 s for the keys and values of")
    assert "from rank 2: a rank stalled or the network stopped" in str(error)
    assert str(error).endswith(f"(set {STALL_TIMEOUT_ENV} to wait longer)")


def test_waits_within_their_deadline_end_nothing(failures):
    watchdog = Watchdog(0.3)
    for _ in range(5):  # each wait gets the whole deadline anew
        with watchdog.waiting("the step's header from rank 0"):
            time.sleep(0.1)
    time.sleep(0.5)  # disarmed: an idle wait as long as it likes
    assert failures.errors == []


def test_the_deadline_comes_from_the_environment_and_a_bad_one_is_one_line(monkeypatch):
    monkeypatch.delenv(STALL_TIMEOUT_ENV, raising=False)
    assert stall_timeout() == 60
    monkeypatch.setenv(STALL_TIMEOUT_ENV, "2.5")
    assert stall_timeout() == 2.5
    for bad in ("0", "soon"):
        monkeypatch.setenv(STALL_TIMEOUT_ENV, bad)
        with pytest.raises(LazymlxError, match=f"{STALL_TIMEOUT_ENV} must be a number of seconds"):
            stall_timeout()
