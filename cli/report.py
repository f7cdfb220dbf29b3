"""Benchmark, eval and calibration results as a table (markdown-shaped), JSON or CSV on stdout.

The md table is a rich table drawn with markdown borders: readable in a terminal and pasteable
into a README as it is, with the run's header (device, versions, presets...) under it, where it
does not push the table off the first screen. JSON is one object (header keys, then "rows" and
any extra lists).
"""

from __future__ import annotations

import csv
import io
import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from lazymlx.cli.console import Eta, err, out
from lazymlx.errors import LazymlxError

FORMATS = ("md", "json", "csv")
Column = tuple[str, str, Callable[[Any], str]]  # (key, heading, how a value is shown)


def check_format(output: str) -> str:
    if output not in FORMATS:
        raise LazymlxError(f"unknown --output {output!r}; choose one of: {', '.join(FORMATS)}")
    return output


def seconds(value: float) -> str:
    return f"{value:.2f}"


def ratio(value: float) -> str:
    return f"{value:.2f}x"


def percent(value: float) -> str:
    return f"{value:.0%}"


def yes_no(value: bool | None) -> str:
    return "—" if value is None else ("yes" if value else "no")


def emit(
    output: str, head: dict, rows: list[dict], columns: list[Column], **extra: list[dict]
) -> None:
    """Print rows in the chosen format; md shows `columns`, json and csv every key."""
    if output == "json":
        out.file.write(json.dumps(head | {"rows": rows} | extra, indent=1) + "\n")
    elif output == "csv":
        writer = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]) if rows else [])
        writer.writeheader()
        writer.writerows(rows)
    else:
        table = Table(box=box.MARKDOWN, show_edge=True)
        for _, heading, _ in columns:
            table.add_column(heading, no_wrap=True)
        for row in rows:
            table.add_row(*(cell(row[key], show) for key, _, show in columns))
        # a file or a pipe: nothing limits the width, so keep every cell whole
        width = None
        if not out.is_terminal:
            width = Measurement.get(out, out.options.update(max_width=10_000), table).maximum
        text = io.StringIO()
        Console(file=text, width=width or out.width, highlight=False).print(table)
        # a markdown box draws its top and bottom edges as lines of spaces: leave them out
        lines = [line.rstrip() for line in text.getvalue().splitlines() if line.strip()]
        out.file.write("\n".join(lines) + "\n")
        _head_lines(head)


def cell(value: Any, show: Callable[[Any], str]) -> str:
    """A table cell: `show`'s text, or — where there is no value (never Python's None)."""
    return "—" if value is None else show(value)


def _head_lines(head: dict) -> None:
    """The run's header under the table (the table is what a reader came for): one `key:
    value` line each, a dict's entries one a line, keys without a value left out."""
    for key, value in head.items():
        for line in value.items() if isinstance(value, dict) else [value]:
            if line is None or isinstance(line, tuple) and line[1] is None:
                continue
            shown = f"{line[0]}: {line[1]}" if isinstance(line, tuple) else line
            out.print(f"{key}: {shown}", soft_wrap=True)


def _plain_lines(total: int) -> Callable[[str], None]:
    started, done = time.monotonic(), -1

    def advance(description: str) -> None:
        nonlocal done
        done += 1
        elapsed = time.monotonic() - started
        left = f", ETA {timedelta(seconds=round(elapsed / done * (total - done)))}" if done else ""
        err.print(
            f"[{done + 1}/{total}] {description} ({timedelta(seconds=round(elapsed))}{left})",
            soft_wrap=True,
            highlight=False,
        )

    return advance


@contextmanager
def run_progress(total: int) -> Iterator[Callable[[str], None]]:
    """A bar over all runs on stderr, with the time left at the pace so far; the spinner and
    clock keep moving during a long prefill.

    Off a terminal (a log file, a redirected stderr) a live bar is only noise, so each run gets
    one plain line instead: an hour-long eval's log says where it is and how long is left.
    """
    if not err.is_terminal:
        yield _plain_lines(total)
        return
    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        Eta(),
        console=err,
        transient=True,
    )
    task = progress.add_task("starting", total=total)
    started = False

    def advance(description: str) -> None:
        nonlocal started
        if started:
            progress.advance(task)
        started = True
        progress.update(task, description=description)

    with progress:
        yield advance


@contextmanager
def clock_progress(total_s: float) -> Iterator[Callable[[str], None]]:
    """A bar over a calibration search's expected seconds on stderr, filled by the time spent,
    with the time left beside the run at hand. A search's runs are not known ahead (it stops
    when its answer is known), so a count of runs would promise what it does not do; the
    time is what a user plans a coffee break around. Off a terminal, one plain line a run."""
    started = time.monotonic()

    def line(description: str) -> str:
        elapsed = time.monotonic() - started
        left = timedelta(seconds=round(max(total_s - elapsed, 0)))
        return f"{description} ({timedelta(seconds=round(elapsed))}, about {left} left)"

    if not err.is_terminal:
        yield lambda description: err.print(line(description), soft_wrap=True, highlight=False)
        return
    progress = Progress(
        SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), console=err, transient=True
    )
    task = progress.add_task("starting", total=max(total_s, 1.0))
    with progress:
        yield lambda description: progress.update(
            task, completed=time.monotonic() - started, description=line(description)
        )
