"""The interactive chat loop: reading input, slash commands, streaming replies, per-answer stats."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from lazymlx.cli.console import PromptProgress, err, error_line, write_text
from lazymlx.contexts import context_file_exists
from lazymlx.errors import LazymlxError
from lazymlx.generation import Response
from lazymlx.sampling import parse_value
from lazymlx.session import ChatSession

MULTILINE = '"""'
HELP = """commands:
  /help        this help
  /clear       forget the conversation (the system prompt stays)
  /save FILE   save the conversation and its computed context to FILE
  /load FILE   continue a conversation saved with /save (or --prompt-cache-file)
  /status      the conversation's size and how much of its context is computed
  /set         the sampling settings (the chat starts with --temp, --top-p, ...)
  /set NAME V  change one for the next answers: temp (0: greedy), top_p, top_k,
               min_p, repetition_penalty (e.g. 1.1; 1: none), max_tokens
  /bye         leave (Ctrl-D works too)
  \"\"\"          start and end a multi-line message (a paste is one anyway)
Ctrl-C stops the current answer (its stats line still shows); the chat goes on.
An answer that repeats itself: Ctrl-C, then /set repetition_penalty 1.1."""


# the sampling settings `/set` changes, each checked by the one request check
# (lazymlx/sampling.py), so a bad value is refused at once with the command line's limits
# rather than failing the next answer
SETTINGS = ("temp", "top_p", "top_k", "min_p", "repetition_penalty", "max_tokens")
# the names ollama's chat and the command line's flags use for the same settings
SETTING_ALIASES = {"temperature": "temp", "repeat_penalty": "repetition_penalty"}


ReadLine = Callable[[str], str]


class LineReader:
    """The chat's input line, read with prompt_toolkit: editing and history, and a bracketed
    paste (a pasted document) taken whole into one message, its lines and tokens shown below
    before Enter sends it. While it waits for a key it runs `idle()` units (completing the
    context; each returns whether more is left): a key press waits at most for one unit."""

    def __init__(self, idle: Callable[[], bool], count_tokens: Callable[[str], int]) -> None:
        from prompt_toolkit import PromptSession
        from prompt_toolkit.history import InMemoryHistory

        self.idle, self.count_tokens = idle, count_tokens
        self.prompts: Any = PromptSession(history=InMemoryHistory())
        self._counted: tuple[str, str] = ("", "")

    def __call__(self, prompt: str) -> str:
        return self.prompts.prompt(prompt, inputhook=self._hook, bottom_toolbar=self._toolbar)

    def _hook(self, context: Any) -> None:
        while not context.input_is_ready() and self.idle():
            pass

    def _toolbar(self) -> str | None:
        """Under a message of several lines (a paste): its size, before it is sent."""
        text = self.prompts.default_buffer.text
        if "\n" not in text:
            return None
        if self._counted[0] != text:
            lines = text.count("\n") + 1
            self._counted = (
                text,
                f"{lines} lines · {self.count_tokens(text)} tokens · Enter sends",
            )
        return self._counted[1]


def stats_line(response: Response, verbose: bool = False, stopped: bool = False) -> str:
    """One dim line under an answer, within 80 columns: `TTFT 2.4 s · 541 tok (520 cached) ·
    48% of the work · 14 tok/s · 0.6 GB`. The work share (the conversation's (token, layer)
    work against stock's) shows when the engine ran, with the pruned tokens this turn brought
    back, or `pruned nothing` where it ran whole; stock mlx-lm's line has none. verbose: every
    figure, spelled out. stopped: the answer was cut short (Ctrl-C), said after its decode
    speed in place of the peak memory, so the line keeps its width and the TTFT of exactly the
    answers a user stops is not lost."""
    lazy = response.lazy
    cached = f" ({response.cached_tokens} cached)" if response.cached_tokens else ""
    if verbose:
        work = ""
        if lazy and not lazy.pruned:
            work = " · pruned nothing (every token ran every layer)"
            work = work[:-1] + f": {lazy.how})" if lazy.how else work
        elif lazy:
            work = f" · context {lazy.work_share:.0%} of stock's layer work"
            if lazy.revived_tokens:
                work += f", {lazy.revived_tokens} pruned tokens revived"
            if lazy.how:
                work += f" ({lazy.how})"
        return (
            f"TTFT {response.ttft_s:.2f} s · prompt {response.prompt_tokens} tok{cached}, "
            f"{response.prompt_tps:.1f} tok/s{work} · generation {response.generation_tokens} "
            f"tok, {response.generation_tps:.1f} tok/s · peak memory {response.peak_memory:.2f} GB"
            + (" · answer stopped" if stopped else "")
        )
    ttft = f"{response.ttft_s:.1f}" if response.ttft_s >= 1 else f"{response.ttft_s:.2f}"
    parts = [f"TTFT {ttft} s", f"{response.prompt_tokens} tok{cached}"]
    if lazy:
        parts.append(lazy.said())
    if response.generation_tokens > 1:
        parts.append(f"{response.generation_tps:.0f} tok/s" + (", stopped" if stopped else ""))
    elif stopped:
        parts.append("stopped")
    if not stopped:
        parts.append(f"{response.peak_memory:.1f} GB")
    return " · ".join(parts)


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def status_line(session: ChatSession) -> str:
    """The conversation's size and how much of its context is computed (idle time completes it)."""
    turns = sum(m["role"] == "user" for m in session.messages)
    line = f"{plural(turns, 'turn')}, {plural(len(session.context.tokens), 'token')} in context"
    if not session.context.lazy:
        return line
    state = session.context.cache
    share = state.pairs() / (state.offset * state.num_layers) if state.offset else 1.0
    done = "complete" if session.context.complete else "completing while you type"
    return f"{line} · {share:.0%} of its layer work computed · {done}"


def answer(session: ChatSession, message: str, quiet: bool = False, verbose: bool = False) -> None:
    """Stream one reply to stdout, after a progress bar while a long prompt is computed, and its
    stats to stderr (quiet: the reply only); Ctrl-C ends the reply, not the session, and the
    stats of what it answered so far still show, marked stopped."""
    last = None
    stopped = False
    try:
        with PromptProgress(show=not quiet) as progress:
            for last in session.send(message, on_progress=progress):
                progress.close()  # the first token: the bar gives way to the answer
                write_text(last.text)
    except KeyboardInterrupt:
        stopped = True
    write_text("\n")
    if quiet or last is None:  # stopped before the first token: no answer, nothing timed
        if stopped:
            err.print("[dim]answer stopped[/]")
        return
    err.print(stats_line(last, verbose, stopped), style="dim", soft_wrap=True)


def read_message(read_line: ReadLine) -> tuple[str, bool]:
    """One input: (text, is_command). A message is a line or the lines between two \"\"\" marks."""
    line = read_line(">>> ")
    if not line.lstrip().startswith(MULTILINE):
        return line.strip(), line.lstrip().startswith("/")
    lines = [line.lstrip()[len(MULTILINE) :]]
    while not lines[-1].rstrip().endswith(MULTILINE) or len(lines) == 1 and lines[0] == "":
        lines.append(read_line("... "))
    lines[-1] = lines[-1].rstrip()[: -len(MULTILINE)]
    return "\n".join(lines).strip("\n"), False


class ChatFiles:
    """The chat's context files: --prompt-cache-file (loaded at the start if it exists, saved
    after every answer) and /save, /load. A refused file leaves the conversation as it was."""

    def __init__(
        self,
        session: ChatSession,
        model: str,
        preset: str,
        path: str | None,
        complete: bool = True,
    ) -> None:
        self.session, self.model, self.preset, self.path = session, model, preset, path
        self.complete = complete  # complete a pruned context before writing it
        if path and context_file_exists(path):
            self.load(path)

    def save(self, path: str) -> None:
        self.session.save(path, self.model, self.preset, complete=self.complete)

    def load(self, path: str) -> None:
        self.session.load(path, self.model)
        turns = sum(m["role"] == "user" for m in self.session.messages)
        err.print(
            f"[dim]loaded {path}: {plural(turns, 'turn')}, "
            f"{plural(len(self.session.context.tokens), 'token')}[/]"
        )

    def autosave(self) -> None:
        if self.path:
            self.save(self.path)


def settings_line(session: ChatSession) -> str:
    """The sampling settings the next answer uses (unset: stream_generate's default)."""
    values = {name: session.generation.get(name, "default") for name in SETTINGS}
    if values["repetition_penalty"] is None:
        values["repetition_penalty"] = "none"
    return " · ".join(f"{name} {value}" for name, value in values.items())


def set_sampling(session: ChatSession, argument: str) -> None:
    """`/set`: show the sampling settings; `/set NAME VALUE`: change one for the next answers
    (what mlx-lm's make_sampler and make_logits_processors take, as the command line's flags)."""
    if not argument:
        err.print(settings_line(session), style="dim", markup=False, soft_wrap=True)
        return
    name, _, value = argument.partition(" ")
    name = name.lower().replace("-", "_")
    name = SETTING_ALIASES.get(name, name)
    if name not in SETTINGS:
        error_line(f"/set takes {', '.join(SETTINGS)}; got {name!r}")
        return
    try:
        parsed = parse_value(name, value.strip(), f"/set {name}")
    except LazymlxError as error:
        error_line(str(error))
        return
    session.generation[name] = parsed
    err.print(f"{name} {parsed}", style="dim", markup=False)


def run_command(session: ChatSession, command: str, files: ChatFiles | None = None) -> bool:
    """Carry out a slash command; False means leave the chat."""
    name, _, argument = command.strip().partition(" ")
    name, argument = name.lower(), argument.strip()
    if name in ("/bye", "/exit", "/quit"):
        return False
    if name == "/clear":
        session.clear()
        err.print("[dim]conversation cleared[/]")
    elif name in ("/save", "/load"):
        if not argument:
            error_line(f"{name} needs a file name, e.g. {name} chat.safetensors")
        elif files is None:
            error_line(f"{name} is not available here")
        else:
            try:
                if name == "/save":
                    files.save(argument)
                    err.print(f"[dim]saved to {argument}[/]")
                else:
                    files.load(argument)
            except (LazymlxError, OSError) as error:
                error_line(str(error))
    elif name == "/status":
        err.print(status_line(session), style="dim", markup=False, soft_wrap=True)
    elif name == "/set":
        set_sampling(session, argument)
    elif name in ("/help", "/?"):
        err.print(HELP, markup=False)
    else:
        error_line(f"unknown command {name}; type /help for the list")
    return True


def stdin_lines(_prompt: str) -> str:
    """A line of piped input, as a terminal's input line gives it (no prompt echoed into the
    output); EOFError at its end, as Ctrl-D."""
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    return line.removesuffix("\n")


def repl(
    session: ChatSession,
    read_line: ReadLine = input,
    files: ChatFiles | None = None,
    title: str = "",
    quiet: bool = False,
    verbose: bool = False,
    note: str | None = None,
    piped: bool = False,
) -> None:
    """The interactive chat; one dim line opens it: `title` (model, preset, device), then hints;
    `note` (what calibrating costs, the first time a model runs uncalibrated) under it. `piped`:
    the input is a script (`printf 'question\\n/bye\\n' | lazymlx chat`), read as typed, each
    line a message or a command; no opening line, and its end ends the chat quietly."""
    if not piped:
        hints = "type a message, /help for commands, /bye to leave"
        err.print(
            f"{title} · {hints}" if title else hints, style="dim", markup=False, soft_wrap=True
        )
    if note and not piped:
        err.print(note, style="dim", markup=False, soft_wrap=True)
    while True:
        try:
            message, is_command = read_message(read_line)
        except EOFError:
            if not piped:
                write_text("\n")
            return
        except KeyboardInterrupt:
            err.print("\n[dim]use /bye or Ctrl-D to leave[/]")
            continue
        if not message.strip():
            continue
        if is_command:
            if not run_command(session, message, files):
                return
            continue
        try:
            answer(session, message, quiet, verbose)
            if files is not None:
                files.autosave()
        except LazymlxError as error:  # this message can't be answered; the chat goes on
            error_line(str(error))
