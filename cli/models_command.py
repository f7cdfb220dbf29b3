"""`lazymlx models list`, `pull` and `rm`: what the registry and the cache hold, a model fetched
(and converted where needed) ahead of its first use, and one removed from the cache."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from lazymlx.cli.console import conversion_progress, err, out, write_text
from lazymlx.errors import LazymlxError
from lazymlx.models.registry import DEFAULT_MODEL, REGISTRY


def _models_table(rows: list[dict], title: str):
    """The rows as a table that fits 80 columns, on a terminal or piped (rich takes 80 there):
    borderless, one space between columns, every column but the name kept whole, and a long
    name (a GGUF's conversion is named after the file, with a digest) folded onto more lines
    rather than squeezing the others to `…`."""
    from rich.table import Table

    table = Table(
        title=title,
        caption="lazymlx models pull NAME gets one",
        box=None,
        collapse_padding=True,
        pad_edge=False,
        title_justify="left",
        caption_justify="left",
    )
    table.add_column("name", overflow="fold")
    for column in ("family", "layers", "context", "kind", "presets", "on disk", "status"):
        numbers = column in ("layers", "context", "on disk")
        table.add_column(column, no_wrap=True, justify="right" if numbers else "left")
    for row in rows:
        table.add_row(
            row["name"],
            row.get("family", ""),
            str(row.get("layers", "")),
            f"{row['context'] // 1024}k" if "context" in row else "",
            row.get("kind", ""),
            "calibrated" if row["calibrated"] else "built-in",
            f"{row['bytes_on_disk'] / 1e9:.2f} GB" if row["bytes_on_disk"] else "-",
            "[green]ready[/]" if row["status"] == "ready" else row["status"],
        )
    return table


def models_list(
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list instead.")] = False,
) -> None:
    """Show the models the registry knows and those converted locally, with whether each has
    presets calibrated on it (the others run every prompt whole by default)."""
    from lazymlx.models.listing import model_rows
    from lazymlx.models.registry import models_dir

    rows = model_rows()
    if as_json:
        write_text(json.dumps(rows, indent=1) + "\n")
        return
    out.print(_models_table(rows, f"models in {models_dir()}"))


def models_pull(
    name: Annotated[
        str | None,
        typer.Argument(
            metavar="NAME",
            help="A registry name (see `lazymlx models list`) or a Hugging Face hub id "
            "(owner/name), as --model takes.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Download a model and convert it for MLX where needed, so --model NAME starts at once."""
    if name is None:  # never a silent pull of the default: say what there is to pull
        raise LazymlxError(
            "name the model to pull: "
            + ", ".join(f"{n} (the default)" if n == DEFAULT_MODEL else n for n in REGISTRY)
            + ", or a hub id OWNER/NAME"
        )
    from lazymlx.models.loading import resolve

    with conversion_progress() as progress:
        path = resolve(name, progress=progress)
    err.print(f"[green]ready:[/] {name} at {path}", soft_wrap=True)


def models_rm(
    name: Annotated[
        str,
        typer.Argument(
            metavar="NAME",
            help="A name `lazymlx models list` shows: a registry model (its GGUF and "
            "conversions) or another converted model.",
            show_default=False,
        ),
    ],
) -> None:
    """Remove a model from lazymlx's cache (a registry model's pulled GGUF and its conversions,
    or another converted model's folder) to free the disk; `models pull` gets it back."""
    from lazymlx.models.registry import remove_cached

    removed = remove_cached(name)
    freed = sum(size for _, size in removed)
    for path, _ in removed:
        err.print(f"removed {path}", soft_wrap=True, markup=False)
    err.print(f"[green]freed[/] {freed / 1e9:.2f} GB", soft_wrap=True)
