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
        os.chmod(staged, _mode(path))  # a temporary file is private; the file it becomes is not
        os.replace(staged, path)
    finally:
        staged.unlink(missing_ok=True)
    return path


def _mode(path: Path) -> int:
    """The file's own permissions where it exists, else a new file's usual rw-r--r-- (the umask
    is not read: reading it means setting it, process-wide, under other threads' feet)."""
    return path.stat().st_mode & 0o777 if path.exists() else 0o644
