"""Loading the model a command names: a .gguf the import can't convert refused first, then the
model loaded (converted where needed, with a progress bar), split over the group under mlx.launch.

Its own module so that every command's module (cli/app.py, cli/measure.py) imports it, not each
other."""

from __future__ import annotations

from lazymlx.cli.console import conversion_progress


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
    from lazymlx import collectives
    from lazymlx.models.loading import load

    preflight(model)

    with conversion_progress() as progress:
        return load(model, progress=progress, group=collectives.group())
