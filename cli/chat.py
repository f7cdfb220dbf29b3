"""The interactive chat loop: reading input, slash commands, streaming replies, per-answer stats."""

from __future__ import annotations

from collections.abc import Callable

from lazymlx.cli.console import err, error_line, write_text
from lazymlx.generation import Response
from lazymlx.session import ChatSession

MULTILINE = '"""'
HELP = """commands:
  /help    this help
  /clear   forget the conversation (the system prompt stays)
  /bye     leave (Ctrl-D works too)
  \"\"\"      start and end a multi-line message
Ctrl-C stops the current answer; the conversation goes on."""

ReadLine = Callable[[str], str]


def stats_line(response: Response) -> str:
    lazy = (
        f" · prefill computed {response.lazy.prefill_fraction:.0%} of the prompt's layer work"
        if response.lazy
        else ""
    )
    return (
        f"TTFT {response.ttft_s:.2f} s · prompt {response.prompt_tokens} tok, "
        f"{response.prompt_tps:.1f} tok/s{lazy} · generation {response.generation_tokens} tok, "
        f"{response.generation_tps:.1f} tok/s · peak memory {response.peak_memory:.2f} GB"
    )


def answer(session: ChatSession, message: str) -> None:
    """Stream one reply to stdout and its stats to stderr; Ctrl-C ends the reply, not the session."""
    last = None
    try:
        for last in session.send(message):
            write_text(last.text)
    except KeyboardInterrupt:
        write_text("\n")
        err.print("[dim]answer stopped[/]")
        return
    write_text("\n")
    if last is not None:
        err.print(stats_line(last), style="dim", soft_wrap=True)


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


def run_command(session: ChatSession, command: str) -> bool:
    """Carry out a slash command; False means leave the chat."""
    name = command.split()[0].lower()
    if name in ("/bye", "/exit", "/quit"):
        return False
    if name == "/clear":
        session.clear()
        err.print("[dim]conversation cleared[/]")
    elif name in ("/help", "/?"):
        err.print(HELP, markup=False)
    else:
        error_line(f"unknown command {name}; type /help for the list")
    return True


def repl(session: ChatSession, read_line: ReadLine = input) -> None:
    err.print("[dim]type a message, /help for commands, /bye to leave[/]")
    while True:
        try:
            message, is_command = read_message(read_line)
        except EOFError:
            write_text("\n")
            return
        except KeyboardInterrupt:
            err.print("\n[dim]use /bye or Ctrl-D to leave[/]")
            continue
        if not message.strip():
            continue
        if is_command:
            if not run_command(session, message):
                return
            continue
        answer(session, message)
