"""Loading the model a command names: a .gguf the import can't convert refused first, then the
model loaded (converted where needed, with a progress bar), split over the group under mlx.launch
or, with --parallel context, whole on every rank of a chain.

Its own module so that every command's module (cli/generate.py, cli/bench.py, ...) imports it,
not each other."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from lazymlx.cli.console import conversion_progress
from lazymlx.errors import LazymlxError

RANK_ENV = "MLX_RANK"  # set by mlx.launch on every process it starts
Parallel = Annotated[
    str,
    typer.Option(
        "--parallel",
        help="Under mlx.launch: 'tensor' splits the model over the ranks; 'context' gives "
        "each rank the whole model and a slice of a long prompt (docs/distributed.md).",
    ),
]


def preflight(model: str) -> None:
    """A .gguf of an architecture the import can't convert is refused at once, before MLX and
    mlx-lm are imported (seconds) or a tensor is read."""
    from pathlib import Path

    from lazymlx.models.gguf_file import preflight as check_gguf

    path = Path(model).expanduser()
    if path.suffix == ".gguf" and path.is_file():
        check_gguf(path)


def load_model(model: str):
    """The model, split over the group when mlx.launch started this process (every rank loads)."""
    from lazymlx.models.loading import load
    from lazymlx.parallel import collectives

    preflight(model)

    with conversion_progress() as progress:
        return load(model, progress=progress, group=collectives.group())


def in_group() -> bool:
    """Whether this process is one rank of several (mlx.launch); MLX is imported only if so."""
    if RANK_ENV not in os.environ:
        return False
    from lazymlx.parallel import collectives, context_parallel

    return collectives.group() is not None or context_parallel.chain() is not None


def join_parallel(parallel: str, model: str) -> None:
    """--parallel context under mlx.launch: the group runs prompt steps as a chain
    (lazymlx/parallel/context_parallel.py) instead of sharding the model. Rank 0 goes on with the
    command alone; every other rank loads the whole model, runs its slice of each prompt rank 0
    starts, and ends here when rank 0 is done."""
    if parallel not in ("tensor", "context"):
        raise LazymlxError(f"--parallel is tensor or context, got {parallel!r}")
    if parallel == "tensor" or not in_group():
        return
    from lazymlx.parallel import collectives, context_parallel

    group = collectives.group()
    collectives.set_group(None)  # the engine runs as one process on every rank
    context_parallel.join(group)
    if group.rank() != 0:
        loaded, _ = load_model(model)
        context_parallel.follow(loaded)
        raise typer.Exit(0)
