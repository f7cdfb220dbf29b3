"""Where the CLI writes: model text to stdout, everything else (stats, progress, errors) to stderr."""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from lazymlx.errors import LazymlxWarning

out = Console(highlight=False)  # tables and other command output
err = Console(stderr=True, highlight=False)
PROGRESS_MIN_TOKENS = 512  # a shorter prompt is computed before a bar could be read


def error_line(message: str) -> None:
    """One `error:` line; the message is plain text (a `[eval]` in it is no markup)."""
    err.print(f"[bold red]error:[/] {escape(message)}", markup=True, soft_wrap=True)


def follow_rank_zero(rank: int) -> None:
    """Under mlx.launch every rank runs the command and rank 0's output is the command's: the
    others write nothing but their own errors (rank_error_line)."""
    if rank:
        sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (for the process's life)


def rank_error_line(message: str) -> None:
    """An error of this rank alone (lazymlx.errors.RankError), printed on any rank."""
    Console(file=sys.__stderr__, highlight=False).print(
        f"[bold red]error:[/] {escape(message)}", markup=True, soft_wrap=True
    )


def warnings_as_lines() -> None:
    """lazymlx's own warnings print as one line (Python prints two, with a source path); other
    libraries' warnings and transformers' log lines (e.g. "Token indices sequence length is
    longer than ...", which lazymlx checks itself) are about their code, not the command, so
    they stay out of the output."""

    def show(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ARG001
        err.print(f"[yellow]warning:[/] {message}", soft_wrap=True)

    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # read when transformers loads
    warnings.simplefilter("ignore")
    warnings.simplefilter("default", LazymlxWarning)
    warnings.showwarning = show


def write_text(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


class Eta(ProgressColumn):
    """Time left at the average pace so far: rich's own estimate only uses the last 30 s of
    updates, and one prefill chunk or one benchmark run can take longer than that."""

    def render(self, task: Task) -> Text:
        if not task.completed or not task.elapsed or task.total is None:
            return Text("ETA -:--:--", style="progress.remaining")
        left = task.elapsed / task.completed * (task.total - task.completed)
        return Text(f"ETA {timedelta(seconds=round(left))}", style="progress.remaining")


class TokenRate(ProgressColumn):
    """Prompt tokens per second so far."""

    def render(self, task: Task) -> Text:
        rate = task.completed / task.elapsed if task.elapsed else 0.0
        return Text(f"{rate:,.0f} tok/s", style="progress.data.speed")


class PromptProgress:
    """A bar on stderr while a long prompt is computed: tokens done of the total, tok/s, ETA.

    It is mlx-lm's prompt_progress_callback(done, total), called with 0 as the prompt step
    starts, then per prefill chunk (stock mlx-lm) or per layer (the lazy step); the spinner and
    clock move in between. Shown only on a terminal, for prompts of PROGRESS_MIN_TOKENS or more;
    `close()` clears it (when the first token arrives), and so does leaving a `with` block, however
    the answer ended.
    """

    def __init__(self, show: bool = True) -> None:
        self.show = show and err.is_terminal
        self.bar: Progress | None = None

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            if not self.show or total < PROGRESS_MIN_TOKENS:
                return
            self.bar = Progress(
                SpinnerColumn(),
                TextColumn("prompt"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("tokens"),
                TokenRate(),
                TimeElapsedColumn(),
                Eta(),
                console=err,
                transient=True,
            )
            self.bar.add_task("prompt", total=total)
            self.bar.start()
        self.bar.update(self.bar.task_ids[0], completed=done, total=total)

    def close(self) -> None:
        self.show = False
        if self.bar is not None:
            self.bar.stop()
            self.bar = None

    def __enter__(self) -> PromptProgress:
        return self

    def __exit__(self, *exception: object) -> None:
        self.close()


@contextmanager
def conversion_progress() -> Iterator[Callable[..., None]]:
    """A progress bar on stderr while a model is pulled (MB) or converts (tensors); nothing shows
    when neither happens."""
    progress: Progress | None = None

    def update(done: int, total: int, label: str = "converting model (tensors)") -> None:
        nonlocal progress
        if progress is None:
            progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=err,
                transient=True,
            )
            progress.add_task(label, total=total)
            progress.start()
        progress.update(progress.task_ids[0], completed=done, total=total, description=label)

    try:
        yield update
    finally:
        if progress is not None:
            progress.stop()
