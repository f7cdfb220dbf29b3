"""The chat's input line (prompt_toolkit): a bracketed paste is one message, the idle hook runs
while the user types, and /status reports the context."""

from __future__ import annotations

import threading
import time

import pytest
from prompt_toolkit.application import create_app_session
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from lazymlx import LazyConfig
from lazymlx.cli.chat import LineReader, read_message, run_command, status_line
from lazymlx.session import ChatSession

PASTE_START, PASTE_END = "\x1b[200~", "\x1b[201~"


def read_with(keys: list[str], idle=lambda: False, delay: float = 0.0) -> tuple[str, bool]:
    """read_message through a LineReader fed `keys` (each written after `delay` seconds)."""
    with create_pipe_input() as pipe, create_app_session(input=pipe, output=DummyOutput()):
        reader = LineReader(idle, lambda text: len(text.split()))

        def feed() -> None:
            for key in keys:
                time.sleep(delay)
                pipe.send_text(key)

        feeder = threading.Thread(target=feed)
        feeder.start()
        try:
            return read_message(reader)
        finally:
            feeder.join()


@pytest.mark.parametrize("lines", [3, 200])
def test_a_bracketed_paste_is_one_message(lines):
    pasted = "\n".join(f"line {i} of the pasted document" for i in range(lines))
    message, is_command = read_with([PASTE_START + pasted + PASTE_END, "\r"])
    assert message == pasted and not is_command


def test_triple_quotes_still_make_a_multi_line_message():
    message, _ = read_with(['"""first\r', "second\r", 'third"""\r'])
    assert message == "first\nsecond\nthird"


def test_idle_work_runs_while_waiting_for_a_key():
    units = []

    def idle() -> bool:
        units.append(time.monotonic())
        time.sleep(0.005)
        return len(units) < 10_000

    message, _ = read_with(["hello\r"], idle=idle, delay=0.3)
    assert message == "hello" and len(units) > 5


def test_status_says_how_much_of_the_context_is_computed(tiny):
    model, tokenizer = tiny
    lazy = LazyConfig(schedule=((0.25, 0.3),), min_prompt=16)
    session = ChatSession(model, tokenizer, lazy=lazy, max_tokens=3)
    for _ in session.send("a long message about cats and dogs " * 20):
        pass
    assert "completing while you type" in status_line(session)
    session.complete()
    assert status_line(session).endswith("100% of its layer work computed · complete")
    assert run_command(session, "/status")
