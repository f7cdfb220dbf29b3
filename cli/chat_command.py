"""`lazymlx chat`: a chat in the terminal, or one message answered (-p, or a piped stdin).
The chat itself (its input line, commands and stats) is cli/chat.py."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from lazymlx.cli import options
from lazymlx.cli.loading import Parallel, join_parallel, load_model, preflight
from lazymlx.cli.notes import first_use_note, say_note
from lazymlx.errors import LazymlxError
from lazymlx.models.registry import DEFAULT_MODEL, REGISTRY


def chat(
    name: options.ModelArgument = None,
    model: options.ModelOption = DEFAULT_MODEL,
    system: options.System = None,
    max_tokens: options.MaxTokens = 512,
    temp: options.Temperature = 0.0,
    top_p: options.TopP = 1.0,
    top_k: options.TopK = 0,
    min_p: options.MinP = 0.0,
    repetition_penalty: options.RepetitionPenalty = None,
    seed: options.Seed = None,
    prompt: Annotated[
        str | None,
        typer.Option("--prompt", "-p", help="Answer this one message and exit; '-' reads stdin."),
    ] = None,
    lazy: options.Lazy = "default",
    prompt_cache_file: options.PromptCacheFile = None,
    no_complete: options.NoComplete = False,
    quiet: options.Quiet = False,
    verbose: options.Verbose = False,
    parallel: Parallel = "tensor",
) -> None:
    """Chat with a model in the terminal. Piped input is read as typed input, a line a message
    (/ commands honoured, \"\"\" for several lines); -p answers one message (-p - reads all of
    stdin as one) and exits."""
    model = options.one_model(name, model)
    sampling = options.sampling_flags(
        temp, top_p, top_k, min_p, repetition_penalty, seed, max_tokens
    )
    preflight(model)
    from lazymlx.cli.chat import ChatFiles, answer
    from lazymlx.contexts import check_save_path
    from lazymlx.parallel.collectives import on_leader
    from lazymlx.session import ChatSession

    prompt = _one_message(prompt, model)
    if prompt_cache_file:
        on_leader(check_save_path, prompt_cache_file)
    join_parallel(parallel, model)
    config = options.lazy_config(lazy, model)
    loaded = load_model(model)
    note, first = first_use_note(lazy, model, loaded, quiet)
    options.apply_seed(seed)
    session = ChatSession(*loaded, system=system, lazy=config, max_tokens=max_tokens, **sampling)
    files = ChatFiles(session, model, lazy, prompt_cache_file, complete=not no_complete)
    if prompt is None and not sys.stdin.isatty():
        from lazymlx.cli.chat import repl, stdin_lines

        if not quiet:
            say_note(note)
        repl(session, read_line=stdin_lines, files=files, quiet=quiet, verbose=verbose, piped=True)
        return
    if prompt is None:
        _chat_in_terminal(session, files, f"{model} · preset {lazy}", note, first, quiet, verbose)
        return
    if not quiet:
        say_note(note)
    answer(session, prompt.strip(), quiet, verbose)
    files.autosave()


def _one_message(prompt: str | None, model: str) -> str | None:
    """The one message to answer (-p; -p -: all of stdin), or None for a chat, typed or piped
    a line at a time; an empty one, or a chat with a base model, is refused."""
    if prompt is None and not sys.stdin.isatty():
        options.check_stdin()  # under mlx.launch stdin never ends: refused before loading
    if prompt == "-":
        prompt = options.prompt_from_stdin()
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
