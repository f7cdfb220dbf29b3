"""Where the CLI writes: model text to stdout, everything else (stats, progress, errors) to stderr."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

out = Console(highlight=False)  # tables and other command output
err = Console(stderr=True, highlight=False)


def error_line(message: str) -> None:
    err.print(f"[bold red]error:[/] {message}", markup=True, soft_wrap=True)


def warnings_as_lines() -> None:
    """Python warnings print two lines with a source path; users get one line instead."""

    def show(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ARG001
        err.print(f"[yellow]warning:[/] {message}", soft_wrap=True)

    warnings.showwarning = show


def write_text(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


@contextmanager
def conversion_progress() -> Iterator[Callable[[int, int], None]]:
    """A progress bar on stderr while a model converts; nothing shows when no conversion happens."""
    progress: Progress | None = None

    def update(done: int, total: int) -> None:
        nonlocal progress
        if progress is None:
            progress = Progress(
                TextColumn("converting model"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=err,
                transient=True,
            )
            progress.add_task("convert", total=total)
            progress.start()
        progress.update(progress.task_ids[0], completed=done, total=total)

    try:
        yield update
    finally:
        if progress is not None:
            progress.stop()
