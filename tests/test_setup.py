"""`make` installs lazymlx into .venv, not on the PATH: the Makefile and the README's quick start
say how to reach it, or a new user's first `lazymlx ...` is `command not found`."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ACTIVATE = "source .venv/bin/activate"


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_chat_says_how_to_run_lazymlx_after_the_chat():
    """`make -n` lists the recipe without running it: the hint follows the chat."""
    recipe = subprocess.run(
        ["make", "-n", "-B", "chat"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    chat = next(i for i, line in enumerate(recipe) if "lazymlx chat" in line)
    assert any(ACTIVATE in line and line.startswith("echo") for line in recipe[chat + 1 :])


def test_the_quick_start_activates_the_environment_before_its_first_command():
    readme = (REPO / "README.md").read_text()
    quick_start = readme.split("## Quick start", 1)[1]
    assert quick_start.index(ACTIVATE) < quick_start.index("lazymlx chat")
