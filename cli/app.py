"""`lazymlx`: the Typer app, its commands registered from one module per group of commands,
and the entry point. MLX is imported inside commands so --help is fast."""

from __future__ import annotations

import inspect
import os
import signal
import sys
from typing import Annotated

import typer
from typer.core import TyperOption

from lazymlx.cli import (
    bench,
    calibrate_command,
    chat_command,
    evaluate,
    generate,
    harness,
    models_command,
    serve,
)
from lazymlx.cli.console import (
    err,
    error_line,
    follow_rank_zero,
    rank_error_line,
    warnings_as_lines,
    write_text,
)
from lazymlx.cli.loading import RANK_ENV, in_group
from lazymlx.errors import LazymlxError, RankError

HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}
# what runs under mlx.launch, one rank per process (the other commands write files, which every
# rank would do at once, or read a terminal, which mlx.launch never hands over)
GROUP_COMMANDS = ("generate", "chat", "serve", "bench")
_option_type = TyperOption.display_type_rich
# typer's rich help shows "<bool>" beside flags (--json, --help), which take no value
TyperOption.display_type_rich = lambda self, ctx: None if self.is_flag else _option_type(self, ctx)
app = typer.Typer(
    help="On-device LLM inference on MLX with LazyLLM token pruning.",
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings=HELP_OPTIONS,
)
models_app = typer.Typer(help="List, pull and remove models.", context_settings=HELP_OPTIONS)
app.add_typer(models_app, name="models")
app.command()(bench.bench)
app.command("eval")(evaluate.evaluate)
app.command("evaluate")(harness.evaluate)
app.command()(calibrate_command.calibrate)
app.command()(chat_command.chat)
app.command()(generate.generate)
app.command()(serve.serve)
models_app.command("list")(models_command.models_list)
models_app.command("pull")(models_command.models_pull)
models_app.command("rm")(models_command.models_rm)


def _version(value: bool) -> None:
    if value:
        from lazymlx import __version__

        write_text(f"lazymlx {__version__}\n")
        raise typer.Exit


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """On-device LLM inference on MLX with LazyLLM token pruning."""


def _join_group(argv: list[str]) -> None:
    """Under mlx.launch every rank runs the command and rank 0 alone writes: join the group
    first, so a rank that never connects fails before any work."""
    from lazymlx.parallel import collectives, distributed

    follow_rank_zero(int(os.environ[RANK_ENV]))
    distributed.join()
    if collectives.group() is not None and argv[0] not in (
        *GROUP_COMMANDS,
        "-h",
        "--help",
        "--version",
    ):
        raise LazymlxError(
            f"`lazymlx {argv[0]}` runs in one process; run it without mlx.launch "
            f"(under mlx.launch: {', '.join(GROUP_COMMANDS)})"
        )


def _run(argv: list[str]) -> object:
    """The command; under mlx.launch, as one rank of the group."""
    if RANK_ENV not in os.environ:
        return app(args=argv, prog_name="lazymlx", standalone_mode=False)
    from lazymlx.parallel import context_parallel

    try:
        _join_group(argv)
        return app(args=argv, prog_name="lazymlx", standalone_mode=False)
    except BaseException:
        # this rank is ending on its own: mlx.launch ending the others meanwhile is no news
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise
    finally:
        context_parallel.stop()  # rank 0 of a context-parallel group: the others stop following


def _reflow_help(typer_app: typer.Typer) -> None:
    """Commands' help from their docstrings with each paragraph on one line: typer keeps the
    docstring's line breaks, which rich then wraps again at the terminal's width, leaving every
    other line a word long on an 80-column terminal."""
    for info in typer_app.registered_commands:
        if info.help is None and info.callback is not None and info.callback.__doc__:
            paragraphs = inspect.cleandoc(info.callback.__doc__).split("\n\n")
            info.help = "\n\n".join(" ".join(p.split()) for p in paragraphs)
    for group in typer_app.registered_groups:
        _reflow_help(group.typer_instance)


_reflow_help(app)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: a user's mistake is one `error:` line and exit code 1, never a traceback."""
    warnings_as_lines()
    argv = sys.argv[1:] if argv is None else argv
    if not argv:  # bare `lazymlx`: the help, and success
        argv = ["--help"]
    try:
        code = _run(argv)
    except typer.TyperException as error:
        hint = f" (see `{error.ctx.command_path} --help`)" if getattr(error, "ctx", None) else ""
        error_line(error.format_message() + hint)
        sys.exit(error.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        err.print()
        sys.exit(130)
    except RankError as error:  # one rank's own: every rank prints its own
        rank_error_line(str(error))
        sys.exit(1)
    except LazymlxError as error:
        error_line(str(error))
        sys.exit(1)
    except RuntimeError as error:  # a rank of the group gone: this one's line, then it stops
        if not in_group():
            raise
        from lazymlx.parallel import distributed

        distributed.fail(error)
    sys.exit(code if isinstance(code, int) else 0)
