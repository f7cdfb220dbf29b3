"""The README's Python code runs as written: every ```python block, in order, in one namespace,
with the registry model it names stood in for by a tiny random model (loading is the one thing
swapped, so no real model is needed and nothing is downloaded)."""

from __future__ import annotations

import re
from pathlib import Path

import lazymlx
from lazymlx.models.tiny import write_tiny_model

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_the_blocks_are_found():
    assert python_blocks("a\n```python\nx = 1\n```\n```bash\nno\n```\n") == ["x = 1\n"]


def test_the_readmes_python_runs_as_written(tmp_path: Path, monkeypatch, capsys):
    blocks = python_blocks(README.read_text())
    assert blocks, "the README has a Python example"
    # a context long enough for the README's document in the tiny model's byte-level tokens
    tiny = str(write_tiny_model(tmp_path / "tiny", context=32768))
    load, llm = lazymlx.load, lazymlx.LLM
    monkeypatch.setattr(lazymlx, "load", lambda name, *args, **kwargs: load(tiny, *args, **kwargs))
    monkeypatch.setattr(lazymlx, "LLM", lambda name, *args, **kwargs: llm(tiny, *args, **kwargs))
    namespace: dict = {}
    try:
        for block in blocks:
            exec(compile(block, str(README), "exec"), namespace)
    finally:
        for value in namespace.values():
            if isinstance(value, llm):
                value.close()
    assert capsys.readouterr().out.strip()  # the example prints its answer
