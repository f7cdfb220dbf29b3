"""`lazymlx`: chat, generate and manage models. MLX is imported inside commands so --help is fast."""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import signal
import sys
from typing import Annotated

import typer
from typer.core import TyperOption

from lazymlx.cli import measure
from lazymlx.cli.console import (
    PromptProgress,
    conversion_progress,
    err,
    error_line,
    follow_rank_zero,
    out,
    rank_error_line,
    warnings_as_lines,
    write_text,
)
from lazymlx.cli.loading import RANK_ENV, Parallel, in_group, join_parallel, load_model, preflight
from lazymlx.engine.config import DERIVED, PRESETS, LazyConfig
from lazymlx.errors import LazymlxError, RankError
from lazymlx.models.registry import DEFAULT_MODEL, REGISTRY

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
models_app = typer.Typer(help="List and pull models.", context_settings=HELP_OPTIONS)
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
# the values' limits are the one request check's (lazymlx/sampling.py), checked in _sampling
MaxTokens = Annotated[int, typer.Option("--max-tokens", "-n", help="Most tokens to generate.")]
Temperature = Annotated[float, typer.Option("--temp", help="Sampling temperature; 0 is greedy.")]
TopP = Annotated[float, typer.Option("--top-p", help="Nucleus sampling mass.")]
TopK = Annotated[int, typer.Option("--top-k", help="Sample from the k likeliest; 0: all.")]
MinP = Annotated[float, typer.Option("--min-p", help="Drop tokens below min-p × the top one.")]
RepetitionPenalty = Annotated[
    float | None,
    typer.Option("--repetition-penalty", help="Penalize repeats (mlx-lm's; e.g. 1.1)."),
]
Seed = Annotated[int | None, typer.Option("--seed", help="Random seed, for repeatable sampling.")]
System = Annotated[
    str | None, typer.Option("--system", "--system-prompt", "-s", help="System prompt.")
]
PromptCacheFile = Annotated[
    str | None,
    typer.Option(
        "--prompt-cache-file",
        help="A context file: continue from it if it exists, save the context to it after.",
    ),
]
ModelArgument = Annotated[
    str | None,
    typer.Argument(
        metavar="MODEL",
        help="The model, as --model takes it (ollama's `run MODEL` habit).",
        show_default=False,
    ),
]
Quiet = Annotated[
    bool, typer.Option("--quiet", "-q", help="No progress bar and no stats line on stderr.")
]
Verbose = Annotated[
    bool, typer.Option("--verbose", "-v", help="Every figure in the stats line, spelled out.")
]
NoComplete = Annotated[
    bool,
    typer.Option(
        "--no-complete",
        help="Save a pruned context as it is, without computing what pruning skipped first.",
    ),
]
Lazy = Annotated[
    str,
    typer.Option(
        "--lazy",
        help=f"LazyLLM pruning preset: {', '.join(PRESETS)} or one `lazymlx calibrate` saved; "
        "off runs stock mlx-lm (keep-all: lazymlx's engine keeping every token).",
    ),
]


GeneratePrompt = Annotated[
    str | None, typer.Option("--prompt", "-p", help="The prompt; '-' reads stdin.")
]
Raw = Annotated[
    bool,
    typer.Option(
        "--raw",
        "--ignore-chat-template",
        help="Use the prompt as plain text, without the chat template.",
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print one JSON object with text and stats.")]
Readonly = Annotated[
    bool,
    typer.Option(
        "--prompt-cache-readonly",
        help="Continue from the context file but leave it as it is (mlx-lm's use of it).",
    ),
]


def _lazy_config(preset: str, model: str) -> LazyConfig | None:
    """The engine's config for a preset name; 'off' is stock mlx-lm (None), which runs in one
    process, so a context-parallel chain (which runs the engine's prompt step) refuses it."""
    from lazymlx import context_parallel, distributed
    from lazymlx.engine.presets import resolve_preset

    if preset == "off":
        if context_parallel.chain() is not None:
            raise LazymlxError(
                "--lazy off is stock mlx-lm, which runs in one process; on a --parallel "
                "context chain run --lazy keep-all (lazymlx's engine keeping every token)"
            )
        return None
    # each rank reads its machine's saved presets: one that lacks this preset says so
    return distributed.everywhere(lambda: resolve_preset(preset, model), "find the preset")


def _calibration_note(preset: str, model: str) -> str | None:
    """What to say, once the model is loaded, when its presets were not calibrated on it: the
    default runs whole there, and the built-in rules that prune were not checked on it."""
    from lazymlx import collectives
    from lazymlx.engine.presets import calibrated

    if preset not in ("default", "gentle", "fast", *DERIVED) or collectives.rank() != 0:
        return None
    if calibrated(model):
        return None
    if preset in ("gentle", "fast"):
        return (
            f"{model} has no calibrated presets: {preset!r} is a built-in rule, not checked on "
            f"this model; `lazymlx calibrate -m {model}` fits one to it"
        )
    return (
        f"{model} is not calibrated, so {preset!r} runs every prompt whole (stock's answers); "
        f"`lazymlx calibrate -m {model}` finds a pruned default that keeps its answers, or "
        "--lazy gentle or fast prune now, as trades"
    )


def _first_use_note(
    preset: str, model: str, loaded, quiet: bool = False
) -> tuple[str | None, bool]:
    """The calibration note, and whether it is the first-use one: the first time an
    uncalibrated model runs here, instead one line saying what the preset computes and how
    long `lazymlx calibrate` would take on this machine, timed on a short stock prompt
    (seconds, once per model): the moment a user first meets an uncalibrated model is the
    moment to say what calibrating costs. A quiet run shows no note, so it keeps the first use
    for later."""
    from lazymlx import collectives

    note = _calibration_note(preset, model)
    # a group's ranks run the model together: rank 0 cannot time it alone
    if note is None or quiet or collectives.size() > 1 or not _first_time(model):
        return note, False
    from lazymlx.engine.presets import resolve_preset
    from lazymlx.evals.calibration import expected_minutes
    from lazymlx.models.adapters import adapter_for

    minutes = expected_minutes(*loaded, model)
    adapter = adapter_for(loaded[0])  # a windowed model prunes only at its global layers
    share = resolve_preset(preset, model).work_share(
        2048, len(adapter.layers), adapter.ranking_layers
    )
    what = (
        "runs every prompt whole"
        if share >= 1
        else f"is a built-in rule, {share:.0%} of the prompt work at 2k tokens"
    )
    return (
        f"{model} is not calibrated: {preset!r} {what}; "
        f"`lazymlx calibrate -m {model}` takes about {minutes:.0f} minutes on this machine"
        + (" (--minutes 10 fits it to ten)" if minutes > 10 else "")
    ), True


def _told(loaded, preset: str, model: str):
    """The loaded model, after its first-use line where it has one (the server loads in its
    generation thread, so the line comes as the model is ready)."""
    note, first = _first_use_note(preset, model, loaded)
    if first:
        _say_note(note)
    return loaded


def _first_time(model: str) -> bool:
    """Whether this model has not been used here before, marking it used (told.json beside the
    saved presets)."""
    from lazymlx.engine.presets import model_key, presets_file

    path = presets_file().with_name("told.json")
    try:
        told = json.loads(path.read_text()) if path.exists() else {}
    except (OSError, ValueError):
        told = {}
    key = model_key(model)
    if key in told:
        return False
    told[key] = True
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(told))
    return True


def _one_model(name: str | None, model: str) -> str:
    """The model named first (`lazymlx chat MODEL`) or with -m; both must agree."""
    if name is not None and model not in (DEFAULT_MODEL, name):
        raise LazymlxError(f"two models named: {name} and -m {model}; give one")
    return name or model


def _check_continues(saved: list[int], prompt: list[int], path: str) -> None:
    """Refuse a prompt that would replace most of a context file's document when saved: it
    must share at least half of the file's tokens (a new question about the same document
    does; an unrelated prompt does not)."""
    from mlx_lm.utils import common_prefix_len

    shared = common_prefix_len(saved, prompt)
    if 2 * shared < len(saved):
        raise LazymlxError(
            f"the prompt shares {shared} of the {len(saved)} tokens saved in {path}, so saving "
            "would replace that context; add --prompt-cache-readonly to answer from it without "
            "saving, or give another --prompt-cache-file"
        )


def _prompt_from_stdin() -> str:
    if in_group():
        raise LazymlxError(
            "under mlx.launch the prompt can't come from stdin or a terminal (mlx.launch never "
            "closes the ranks' stdin); pass it with -p TEXT"
        )
    return sys.stdin.read()


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


def _sampling(temp, top_p, top_k, min_p, repetition_penalty, seed, max_tokens) -> dict:
    """The sampling flags as stream_generate takes them, checked by the one request check
    (lazymlx/sampling.py) before anything loads, a bad one named as its flag; the seed is
    applied by _seed once the model is loaded (loading draws random numbers)."""
    from lazymlx.sampling import check_sampling

    sampling = {
        "temp": temp,
        "top_p": top_p,
        "top_k": top_k,
        "min_p": min_p,
        "repetition_penalty": repetition_penalty,
    }
    flags = sampling | {"seed": seed, "max_tokens": max_tokens}
    check_sampling(flags, spell=lambda name: "--" + name.replace("_", "-"))
    return sampling


def _seed(seed: int | None) -> None:
    """Seed MLX's sampling (none: leave it as it is)."""
    if seed is not None:
        import mlx.core as mx

        mx.random.seed(seed)


@app.command()
def chat(
    name: ModelArgument = None,
    model: ModelOption = DEFAULT_MODEL,
    system: System = None,
    max_tokens: MaxTokens = 512,
    temp: Temperature = 0.0,
    top_p: TopP = 1.0,
    top_k: TopK = 0,
    min_p: MinP = 0.0,
    repetition_penalty: RepetitionPenalty = None,
    seed: Seed = None,
    prompt: Annotated[
        str | None,
        typer.Option("--prompt", "-p", help="Answer this one message and exit; '-' reads stdin."),
    ] = None,
    lazy: Lazy = "default",
    prompt_cache_file: PromptCacheFile = None,
    no_complete: NoComplete = False,
    quiet: Quiet = False,
    verbose: Verbose = False,
    parallel: Parallel = "tensor",
) -> None:
    """Chat with a model in the terminal (one-shot when stdin is not a terminal or with -p)."""
    model = _one_model(name, model)
    sampling = _sampling(temp, top_p, top_k, min_p, repetition_penalty, seed, max_tokens)
    preflight(model)
    from lazymlx.cli.chat import ChatFiles, answer
    from lazymlx.collectives import on_leader
    from lazymlx.contexts import check_save_path
    from lazymlx.session import ChatSession

    prompt = _one_message(prompt, model)
    if prompt_cache_file:
        on_leader(check_save_path, prompt_cache_file)
    join_parallel(parallel, model)
    config = _lazy_config(lazy, model)
    loaded = load_model(model)
    note, first = _first_use_note(lazy, model, loaded, quiet)
    _seed(seed)
    session = ChatSession(*loaded, system=system, lazy=config, max_tokens=max_tokens, **sampling)
    files = ChatFiles(session, model, lazy, prompt_cache_file, complete=not no_complete)
    if prompt is None:
        _chat_in_terminal(session, files, f"{model} · preset {lazy}", note, first, quiet, verbose)
        return
    if not quiet:
        _say_note(note)
    answer(session, prompt.strip(), quiet, verbose)
    files.autosave()


def _one_message(prompt: str | None, model: str) -> str | None:
    """The one message to answer (-p, or stdin when it is not a terminal), or None for a chat
    in the terminal; an empty one, or a chat with a base model, is refused."""
    if prompt == "-" or (prompt is None and not sys.stdin.isatty()):
        prompt = _prompt_from_stdin()
    if prompt is not None and not prompt.strip():
        raise LazymlxError("the message is empty; pass text with -p or on stdin")
    if model in REGISTRY and not REGISTRY[model].instruct:
        raise LazymlxError(
            f"{model} is a base model: it continues text rather than follows instructions; "
            f'run `lazymlx generate --raw -m {model} -p "the start of a text"`, or chat with '
            f"an instruct model ({', '.join(n for n, m in REGISTRY.items() if m.instruct)})"
        )
    return prompt


def _chat_in_terminal(session, files, title: str, note, first: bool, quiet, verbose) -> None:
    """The interactive chat: the context completes while the user types, the title names the
    model, preset (and whether it was calibrated on it) and device."""
    from lazymlx.cli.chat import LineReader, repl
    from lazymlx.platform import device_name

    reader = LineReader(
        session.complete_step, lambda text: len(session.tokenizer.encode(text, verbose=False))
    )
    title += f"{' (not calibrated on it)' if note else ''} · {device_name()}"
    repl(
        session, read_line=reader, files=files, title=title, quiet=quiet, verbose=verbose,
        note=note if first and not quiet else None,  # the title says the short one
    )  # fmt: skip


def _say_note(note: str | None) -> None:
    """The calibration note, dim, on stderr (none: nothing)."""
    if note:
        err.print(note, style="dim", markup=False, soft_wrap=True)


@app.command()
def generate(
    name: ModelArgument = None,
    prompt: GeneratePrompt = None,
    model: ModelOption = DEFAULT_MODEL,
    system: System = None,
    max_tokens: MaxTokens = 256,
    temp: Temperature = 0.0,
    top_p: TopP = 1.0,
    top_k: TopK = 0,
    min_p: MinP = 0.0,
    repetition_penalty: RepetitionPenalty = None,
    seed: Seed = None,
    raw: Raw = False,
    as_json: AsJson = False,
    lazy: Lazy = "default",
    prompt_cache_file: PromptCacheFile = None,
    readonly: Readonly = False,
    no_complete: NoComplete = False,
    quiet: Quiet = False,
    verbose: Verbose = False,
    parallel: Parallel = "tensor",
) -> None:
    """Generate a completion for one prompt."""
    model = _one_model(name, model)
    if prompt is None:
        raise LazymlxError("give the prompt with -p TEXT (or -p - to read it from stdin)")
    sampling = _sampling(temp, top_p, top_k, min_p, repetition_penalty, seed, max_tokens)
    if readonly and not prompt_cache_file:
        raise LazymlxError("--prompt-cache-readonly reads a context file: add --prompt-cache-file")
    preflight(model)
    from lazymlx.collectives import on_leader
    from lazymlx.contexts import check_save_path, save_context

    prompt = _prompt_text(prompt, raw, system)
    if prompt_cache_file and not readonly:
        on_leader(check_save_path, prompt_cache_file)
    join_parallel(parallel, model)
    config = _lazy_config(lazy, model)
    loaded_model, tokenizer = load_model(model)
    note, _ = _first_use_note(lazy, model, (loaded_model, tokenizer), quiet)
    if not quiet:
        _say_note(note)
    _seed(seed)
    tokens = _prompt_tokens(tokenizer, prompt, system, raw)
    context = _generate_context(loaded_model, model, config, tokens, prompt_cache_file, readonly)
    text, last = _stream_answer(
        loaded_model, tokenizer, context, tokens, quiet, as_json,
        max_tokens=max_tokens, lazy=config, **sampling,
    )  # fmt: skip
    _finish_answer(_json_result(model, lazy, text, last) if as_json else None, last, quiet, verbose)
    if prompt_cache_file and not readonly:  # after the answer: completing takes a while
        save_context(prompt_cache_file, context, model, lazy, complete=not no_complete)


def _prompt_text(prompt: str, raw: bool, system: str | None) -> str:
    """-p's text (stdin's for '-'), refused when empty, not UTF-8, or given a system prompt
    without the chat template to put it in."""
    from lazymlx.generation import check_text

    if prompt == "-":
        prompt = _prompt_from_stdin()
    if not prompt.strip():
        raise LazymlxError("the prompt is empty; pass text with -p")
    check_text(prompt)
    if raw and system:
        raise LazymlxError("--system needs the chat template; drop --raw or put it in the prompt")
    return prompt


def _prompt_tokens(tokenizer, prompt: str, system: str | None, raw: bool) -> list[int]:
    """The prompt's tokens: the text as it is (--raw), else a chat of the system prompt and the
    prompt as the user's message, rendered with the model's chat template."""
    from lazymlx.generation import encode_prompt
    from lazymlx.turn import render_chat

    if raw:
        return encode_prompt(tokenizer, prompt).tolist()
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": prompt})
    return render_chat(tokenizer, messages, "add --raw to use the prompt as plain text")


def _generate_context(model, name: str, config, tokens: list[int], path, readonly: bool):
    """The context to answer over: the context file's when there is one (refused unless it
    continues the file's document, when the answer will be saved to it), else a new one."""
    from lazymlx.contexts import Context, context_file_exists, load_context, new_cache

    if path and context_file_exists(path):
        context, _ = load_context(path, model, name, config)
        if not readonly:
            _check_continues(context.tokens, tokens, path)
        return context
    if readonly:
        raise LazymlxError(f"no context file at {path} to continue from")
    return Context(new_cache(model, config))


def _stream_answer(model, tokenizer, context, tokens, quiet: bool, as_json: bool, **options):
    """One turn over the context, after a progress bar while the prompt is computed (unless
    quiet), the text written as it comes (unless as_json); the whole text and the last
    response."""
    from lazymlx.turn import run_turn

    text, last = [], None
    with PromptProgress(show=not quiet) as progress:
        for last in run_turn(
            model, tokenizer, context, tokens, prompt_progress_callback=progress, **options
        ):
            progress.close()  # the first token: the bar gives way to the answer
            text.append(last.text)
            if not as_json:
                write_text(last.text)
    return "".join(text), last


def _finish_answer(result: dict | None, last, quiet: bool, verbose: bool) -> None:
    """After the streamed text, its line end and stats line (unless quiet); with --json, the
    one JSON object in their place."""
    from lazymlx.cli.chat import stats_line

    if result is not None:
        write_text(json.dumps(result) + "\n")
        return
    write_text("\n")
    if not quiet:
        err.print(stats_line(last, verbose), style="dim", soft_wrap=True)


def _json_result(model: str, lazy: str, text: str, last) -> dict:
    """`generate --json`'s object: the text and the last response's counts and speeds."""
    result = {
        "model": model,
        "text": text,
        "prompt_tokens": last.prompt_tokens,
        "generation_tokens": last.generation_tokens,
        "ttft_s": last.ttft_s,
        "prompt_tps": last.prompt_tps,
        "generation_tps": last.generation_tps,
        "peak_memory_gb": last.peak_memory,
        "finish_reason": last.finish_reason,
        "lazy": lazy,
        "cached_tokens": last.cached_tokens,
    }
    if last.lazy and last.lazy.pruned:  # what pruning bought, when it changed anything
        result["work_share"] = last.lazy.work_share
        result["revived_tokens"] = last.lazy.revived_tokens
    return result


def _model_rows() -> list[dict]:
    """The registry's models, then other converted models in the cache (a GGUF's conversion,
    a hub model): one dict each, as `models list --json` prints them."""
    from lazymlx.engine.presets import calibrated
    from lazymlx.models.registry import converted_dir, directory_size, local_models

    rows = []
    listed = set()
    for name, source in REGISTRY.items():
        target = converted_dir(name)
        listed.add(target)
        ready = (target / "config.json").exists()
        gguf = source.gguf_path()
        on_disk = (directory_size(target) if ready else 0) + (gguf.stat().st_size if gguf else 0)
        rows.append(
            {
                "name": name,
                "status": "ready" if ready else "pulled" if gguf else "not pulled",
                "description": source.title,
                "family": source.family,
                "layers": source.layers,
                "context": source.context,
                "kind": "instruct" if source.instruct else "base",
                "calibrated": calibrated(name),
                "bytes_on_disk": on_disk,
                "path": str(target),
            }
        )
    for path in local_models():
        if path not in listed:
            rows.append(
                {"name": path.name, "status": "ready", "description": "", "path": str(path)}
                | {"calibrated": calibrated(str(path)), "bytes_on_disk": directory_size(path)}
            )
    return rows


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


@models_app.command("list")
def models_list(
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list instead.")] = False,
) -> None:
    """Show the models the registry knows and those converted locally, with whether each has
    presets calibrated on it (the others run every prompt whole by default)."""
    from lazymlx.models.registry import models_dir

    rows = _model_rows()
    if as_json:
        write_text(json.dumps(rows, indent=1) + "\n")
        return
    out.print(_models_table(rows, f"models in {models_dir()}"))


@app.command()
def serve(
    model: ModelOption = DEFAULT_MODEL,
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on; 0.0.0.0 exposes it to the network.")
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="0 picks a free one.")
    ] = 8080,
    lazy: Lazy = "default",
    max_tokens: Annotated[
        int, typer.Option("--max-tokens", min=1, help="The most tokens one request may generate.")
    ] = 4096,
    max_request_mb: Annotated[
        float, typer.Option("--max-request-mb", min=0.001, help="The largest request body.")
    ] = 4.0,
    context_gb: Annotated[
        float,
        typer.Option(
            "--context-gb", min=0.0, help="Memory kept for reusing conversations' context."
        ),
    ] = 2.0,
    parallel: Parallel = "tensor",
) -> None:
    """Serve the model over an OpenAI-compatible HTTP API (/v1/chat/completions, ...)."""
    from lazymlx.collectives import on_leader
    from lazymlx.llm import LLM
    from lazymlx.server import Limits, listen
    from lazymlx.server import serve as run_server

    join_parallel(parallel, model)
    _lazy_config(lazy, model)  # an unknown preset fails here, before the model loads
    sock = on_leader(listen, host, port)  # and so does a busy port; rank 0 of a group serves HTTP
    with sock or contextlib.nullcontext():
        llm = LLM(
            lambda: _told(load_model(model), lazy, model),
            lazy=lazy,
            context_bytes=int(context_gb * 1e9),
        )
        if sock is None:  # another rank of a group: it runs the requests rank 0 hands on
            # Ctrl-C in a terminal reaches every rank; rank 0 stops serving and tells the others
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            llm.follow()
            return
        address = f"[{host}]" if ":" in host else host  # an IPv6 address in a URL
        where = f"http://{address}:{sock.getsockname()[1]}/v1"  # the port given, or the one picked
        err.print(f"serving {model} at {where} (OpenAI-compatible; Ctrl-C stops)", soft_wrap=True)
        try:
            run_server(llm, sock, Limits(max_tokens, int(max_request_mb * 1e6)))
        finally:
            llm.close()


@models_app.command("pull")
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


def _join_group(argv: list[str]) -> None:
    """Under mlx.launch every rank runs the command and rank 0 alone writes: join the group
    first, so a rank that never connects fails before any work."""
    from lazymlx import collectives, distributed

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
    from lazymlx import context_parallel

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
        from lazymlx import distributed

        distributed.fail(error)
    sys.exit(code if isinstance(code, int) else 0)
