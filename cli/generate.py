"""`lazymlx generate`: one prompt answered, over a context file when one is given."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from lazymlx.cli import options
from lazymlx.cli.console import PromptProgress, err, write_text
from lazymlx.cli.loading import Parallel, join_parallel, load_model, preflight
from lazymlx.cli.notes import first_use_note, say_note
from lazymlx.errors import LazymlxError
from lazymlx.models.registry import DEFAULT_MODEL

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


def generate(
    name: options.ModelArgument = None,
    prompt: GeneratePrompt = None,
    model: options.ModelOption = DEFAULT_MODEL,
    system: options.System = None,
    max_tokens: options.MaxTokens = 256,
    temp: options.Temperature = 0.0,
    top_p: options.TopP = 1.0,
    top_k: options.TopK = 0,
    min_p: options.MinP = 0.0,
    repetition_penalty: options.RepetitionPenalty = None,
    seed: options.Seed = None,
    raw: Raw = False,
    as_json: AsJson = False,
    lazy: options.Lazy = "default",
    prompt_cache_file: options.PromptCacheFile = None,
    readonly: Readonly = False,
    no_complete: options.NoComplete = False,
    quiet: options.Quiet = False,
    verbose: options.Verbose = False,
    parallel: Parallel = "tensor",
) -> None:
    """Generate a completion for one prompt."""
    model = options.one_model(name, model)
    if prompt is None:
        raise LazymlxError("give the prompt with -p TEXT (or -p - to read it from stdin)")
    sampling = options.sampling_flags(
        temp, top_p, top_k, min_p, repetition_penalty, seed, max_tokens
    )
    if readonly and not prompt_cache_file:
        raise LazymlxError("--prompt-cache-readonly reads a context file: add --prompt-cache-file")
    preflight(model)
    from lazymlx.contexts import check_save_path, save_context
    from lazymlx.parallel.collectives import on_leader

    prompt = _prompt_text(prompt, raw, system)
    if prompt_cache_file and not readonly:
        on_leader(check_save_path, prompt_cache_file)
    join_parallel(parallel, model)
    config = options.lazy_config(lazy, model)
    loaded_model, tokenizer = load_model(model)
    note, _ = first_use_note(lazy, model, (loaded_model, tokenizer), quiet)
    if not quiet:
        say_note(note)
    options.apply_seed(seed)
    tokens = _prompt_tokens(tokenizer, prompt, system, raw)
    context = _generate_context(loaded_model, model, config, tokens, prompt_cache_file, readonly)
    text, last, stopped = _stream_answer(
        loaded_model, tokenizer, context, tokens, quiet, as_json,
        max_tokens=max_tokens, lazy=config, **sampling,
    )  # fmt: skip
    if stopped:  # Ctrl-C: the line ended, a note, and nothing saved
        _stopped_answer(last, quiet, verbose, as_json)
        raise typer.Exit(130)
    _finish_answer(_json_result(model, lazy, text, last) if as_json else None, last, quiet, verbose)
    if prompt_cache_file and not readonly:  # after the answer: completing takes a while
        save_context(prompt_cache_file, context, model, lazy, complete=not no_complete)


def _prompt_text(prompt: str, raw: bool, system: str | None) -> str:
    """-p's text (stdin's for '-'), refused when empty, not UTF-8, or given a system prompt
    without the chat template to put it in."""
    from lazymlx.generation import check_text

    if prompt == "-":
        prompt = options.prompt_from_stdin()
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


def _stream_answer(model, tokenizer, context, tokens, quiet: bool, as_json: bool, **generation):
    """One turn over the context, after a progress bar while the prompt is computed (unless
    quiet), the text written as it comes (unless as_json); the whole text, the last response
    and whether Ctrl-C stopped it."""
    from lazymlx.turn import run_turn

    text, last = [], None
    try:
        with PromptProgress(show=not quiet) as progress:
            for last in run_turn(
                model, tokenizer, context, tokens, prompt_progress_callback=progress, **generation
            ):
                progress.close()  # the first token: the bar gives way to the answer
                text.append(last.text)
                if not as_json:
                    write_text(last.text)
    except KeyboardInterrupt:
        return "".join(text), last, True
    return "".join(text), last, False


def _stopped_answer(last, quiet: bool, verbose: bool, as_json: bool) -> None:
    """After Ctrl-C: the cut line ended, then the chat's note on stderr, the stats of what was
    answered marked stopped (`TTFT 2.4 s · 541 tok · 14 tok/s, stopped`), or `answer stopped`
    where nothing was (stopped in the prompt step) or quiet asked for no stats."""
    from lazymlx.cli.chat import stats_line

    if last is not None and not as_json:
        write_text("\n")
    if quiet or last is None or as_json:
        err.print("[dim]answer stopped[/]")
    else:
        err.print(stats_line(last, verbose, stopped=True), style="dim", soft_wrap=True)


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
    if last.lazy and last.lazy.how:  # why it pruned what it did
        result["pruning"] = last.lazy.how
    return result


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
