"""One way to write a file: beside it, then renamed over it, so an interrupted write (Ctrl-C, a
full disk, a crash) leaves the old file or none, never half of one."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def write_atomic(path: str | Path, write: Callable[[Path], object], suffix: str = ".tmp") -> Path:
    """Call write(staged) on a file beside `path`, then rename it over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=suffix, delete=False) as file:
        staged = Path(file.name)
    try:
        write(staged)
        os.replace(staged, path)
    finally:
        staged.unlink(missing_ok=True)
    return path
