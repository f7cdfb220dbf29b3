"""The CLI through Typer's runner, the chat loop with scripted input, and real subprocesses."""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from rich.console import Console
from rich.progress import Task, TaskID
from typer.testing import CliRunner

from lazymlx import LazyConfig
from lazymlx.cli import chat as chat_module
from lazymlx.cli import console
from lazymlx.cli.app import app, main
from lazymlx.cli.chat import repl
from lazymlx.errors import LazymlxError, LazymlxWarning
from lazymlx.session import ChatSession

runner = CliRunner()
LAZYMLX = str(Path(sys.executable).parent / "lazymlx")


def scripted(lines):
    """A read_line that answers prompts from a list, raising what the list holds as exceptions."""
    queue = list(lines)

    def read_line(_prompt: str) -> str:
        item = queue.pop(0) if queue else EOFError()
        if isinstance(item, BaseException):
            raise item
        return item

    return read_line


def run_main(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out, captured.err


def test_help_lists_commands_without_importing_mlx():
    code = (
        "import sys\nfrom lazymlx.cli.app import main\n"
        "for argv in (['--help'], ['chat', '--help'], ['models', 'list', '--help']):\n"
        "    try:\n        main(argv)\n    except SystemExit as e:\n        assert e.code == 0\n"
        "print('mlx.core' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "chat" in result.stdout and "generate" in result.stdout and "models" in result.stdout
    assert result.stdout.strip().endswith("False")


def test_generate_json(tiny_model_dir: Path):
    result = runner.invoke(
        app, ["generate", "-m", str(tiny_model_dir), "-p", "the cat", "--raw", "-n", "5", "--json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["prompt_tokens"] == 6  # the tiny tokenizer: t, he, Ġ, c, a, t
    assert 1 <= data["generation_tokens"] <= 5
    assert data["ttft_s"] > 0 and data["finish_reason"] in ("stop", "length")


def test_lazy_presets_select_the_engine_or_stock_mlx_lm(tiny_model_dir: Path):
    fractions = {}
    # 40 and 350 repeats: under gentle's 256-token min_prompt, over its 1,024-token floor
    presets = (("gentle", 350), ("off", 350), ("gentle", 40), ("default", 350))
    for preset, repeats in presets:
        result = runner.invoke(
            app,
            ["generate", "-m", str(tiny_model_dir), "-p", "the cat " * repeats, "--raw", "-n", "3"]
            + ["--json", "--lazy", preset],
        )
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        assert data["lazy"] == preset
        fractions[preset, repeats] = data.get("work_share", 1.0)  # absent: nothing pruned
    assert fractions["off", 350] == 1.0 and fractions["gentle", 350] < 0.9
    assert fractions["gentle", 40] == 1.0  # a short prompt runs whole
    assert fractions["default", 350] == 1.0  # an uncalibrated model's default runs whole


def test_generate_applies_the_chat_template_unless_raw(tiny_model_dir: Path):
    templated = runner.invoke(app, ["generate", "-m", str(tiny_model_dir), "-p", "hi", "--json"])
    raw = runner.invoke(app, ["generate", "-m", str(tiny_model_dir), "-p", "hi", "--raw", "--json"])
    assert json.loads(templated.stdout)["prompt_tokens"] > json.loads(raw.stdout)["prompt_tokens"]


def test_chat_one_shot_prints_the_answer_and_stats(tiny_model_dir: Path):
    result = runner.invoke(app, ["chat", "-m", str(tiny_model_dir), "-p", "the cat", "-n", "4"])
    assert result.exit_code == 0, result.output
    assert "TTFT" in result.stderr and " GB" in result.stderr
    assert "TTFT" not in result.stdout


def test_models_list_shows_the_registry():
    result = runner.invoke(app, ["models", "list"])
    assert result.exit_code == 0
    assert "smollm2-135m" in result.stdout


def test_repl_survives_bad_commands_and_handles_multiline(tiny, capsys):
    session = ChatSession(*tiny, max_tokens=3)
    sent = []
    original_send = session.send

    def recording_send(text, on_progress=None):
        sent.append(text)
        return original_send(text, on_progress)

    session.send = recording_send
    repl(
        session,
        scripted(
            [
                "/help",
                "/nope",
                '"""',
                "line one",
                'line two"""',
                KeyboardInterrupt(),
                "the cat",
                "/clear",
                "   ",
                "/bye",
                "never read",
            ]
        ),
    )
    err = capsys.readouterr().err
    assert "/clear" in err  # the help text
    assert "unknown command /nope; type /help" in err
    assert "use /bye or Ctrl-D to leave" in err
    assert sent == ["line one\nline two", "the cat"]
    assert err.count("TTFT") == 2
    assert session.messages == []  # /clear came after both


def test_help_says_how_to_stop_a_runaway_answer(tiny, capsys):
    repl(ChatSession(*tiny, max_tokens=3), scripted(["/help", "/bye"]))
    err = capsys.readouterr().err
    assert "Ctrl-C stops the current answer" in err
    assert "/set repetition_penalty 1.1" in err


@pytest.mark.parametrize(
    ("command", "name", "value"),
    [
        ("/set temp 0.7", "temp", 0.7),
        ("/set temperature 0.5", "temp", 0.5),  # ollama's name
        ("/set top_p 0.9", "top_p", 0.9),
        ("/set top-p 0.8", "top_p", 0.8),  # the flag's spelling
        ("/set top_k 40", "top_k", 40),
        ("/set min_p 0.05", "min_p", 0.05),
        ("/set repetition_penalty 1.1", "repetition_penalty", 1.1),
        ("/set repeat_penalty 1.2", "repetition_penalty", 1.2),  # ollama's name
        ("/set max_tokens 64", "max_tokens", 64),
    ],
)
def test_set_changes_a_sampling_setting_for_the_next_answers(tiny, capsys, command, name, value):
    session = ChatSession(*tiny, max_tokens=3, temp=0.0, top_p=1.0, repetition_penalty=None)
    repl(session, scripted([command, "/set", "/bye"]))
    assert session.generation[name] == value
    assert f"{name} {value}" in capsys.readouterr().err  # said when set, and in /set's list


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("/set temp -1", "/set temp takes a number >= 0 (0: greedy); got '-1'"),
        ("/set top_p 0", "/set top_p takes a number above 0, at most 1 (1: every token); got '0'"),
        ("/set top_k 2.5", "/set top_k takes a whole number >= 0 (0: all); got '2.5'"),
        ("/set min_p nan", "/set min_p takes a number from 0 to 1 (0: none); got 'nan'"),
        ("/set repetition_penalty", "/set repetition_penalty takes a number above 0"),
        ("/set max_tokens 0", "/set max_tokens takes a whole number >= 1; got '0'"),
        ("/set warmth 3", "/set takes temp, top_p, top_k, min_p, repetition_penalty, max_tokens"),
    ],
)
def test_set_refuses_a_bad_value_and_keeps_the_setting(tiny, capsys, command, message):
    session = ChatSession(*tiny, max_tokens=3, temp=0.0, top_p=1.0, top_k=0, min_p=0.0)
    before = dict(session.generation)
    repl(session, scripted([command, "/bye"]))
    assert message in capsys.readouterr().err
    assert session.generation == before


def test_set_repetition_penalty_stops_a_loop(tiny):
    """The tiny model, greedy, repeats one token (a runaway answer); a penalty, through mlx-lm's
    make_logits_processors, makes every token of the next answer differ."""
    session = ChatSession(*tiny, max_tokens=12)
    looping = [response.token for response in session.send("the cat")]
    assert len(set(looping)) < len(looping)
    repl(session, scripted(["/clear", "/set repetition_penalty 1000", "/bye"]))
    tokens = [response.token for response in session.send("the cat")]
    assert len(set(tokens)) == len(tokens) == 12


def test_chat_takes_repetition_penalty_and_sampling_flags(tiny_model_dir: Path):
    common = ["chat", "-m", str(tiny_model_dir), "-p", "the cat", "-n", "12", "-q"]
    greedy = runner.invoke(app, common)
    penalized = runner.invoke(app, [*common, "--repetition-penalty", "1000"])
    sampled = [
        runner.invoke(app, [*common, "--temp", "1", "--top-p", "0.9", "--seed", "3"])
        for _ in range(2)
    ]
    assert greedy.exit_code == penalized.exit_code == sampled[0].exit_code == 0
    assert penalized.stdout != greedy.stdout
    assert sampled[0].stdout == sampled[1].stdout  # seeded


def test_repl_ends_on_ctrl_d(tiny):
    session = ChatSession(*tiny, max_tokens=3)
    repl(session, scripted([EOFError()]))
    assert session.messages == []


def interrupted_at(piece: int):
    """A stand-in for the chat's `write_text` that raises Ctrl-C on its `piece`-th call."""
    written = []

    def write_text(text):
        written.append(text)
        if len(written) == piece:
            raise KeyboardInterrupt

    return write_text


def test_ctrl_c_stops_the_answer_not_the_chat(tiny, capsys, monkeypatch):
    session = ChatSession(*tiny, max_tokens=8)
    monkeypatch.setattr(chat_module, "write_text", interrupted_at(1))
    repl(session, scripted(["the cat", "/bye"]))
    assert " · stopped" in capsys.readouterr().err
    assert [m["role"] for m in session.messages] == ["user", "assistant"]


def test_a_stopped_answer_still_shows_its_stats_marked_stopped(tiny, capsys, monkeypatch):
    """The TTFT of exactly the answers a user stops (a runaway one) is not lost."""
    session = ChatSession(*tiny, max_tokens=8)
    monkeypatch.setattr(chat_module, "write_text", interrupted_at(3))  # the third token
    repl(session, scripted(["the cat", "/bye"]))
    stats = [line for line in capsys.readouterr().err.splitlines() if "TTFT" in line]
    assert len(stats) == 1 and stats[0].startswith("TTFT ") and stats[0].endswith(" tok/s, stopped")
    assert " GB" not in stats[0]  # "stopped" takes the memory figure's place, within 80 columns


def test_ctrl_c_in_generate_ends_the_line_and_says_stopped(tiny_model_dir, monkeypatch):
    """A cut answer's line is ended (the shell's prompt does not land after it) and stderr
    says it was stopped, with the stats of what was answered; exit code 130, as for SIGINT."""
    from lazymlx.cli import generate as generate_module

    written = []
    stop_at_third = interrupted_at(3)

    def write_text(text):
        written.append(text)
        stop_at_third(text)

    monkeypatch.setattr(generate_module, "write_text", write_text)
    argv = ["generate", "-m", str(tiny_model_dir), "-p", "the cat", "--raw", "-n", "8"]
    result = runner.invoke(app, argv)
    assert result.exit_code == 130
    assert len(written) == 4 and written[-1] == "\n"  # two pieces, the cut one, the line's end
    assert result.stderr.strip().endswith("tok/s, stopped")


@pytest.mark.parametrize(
    ("argv", "message", "code"),
    [
        (["chat", "-m", "no-such-model", "-p", "hi"], "unknown model 'no-such-model'", 1),
        (["generate", "-p", "hi", "-m", "/nowhere/x.gguf"], "no such file or directory", 1),
        (["chat", "--max-tokens", "0"], "--max-tokens takes a whole number >= 1; got 0", 1),
        (["chat", "--temp", "hot"], "Invalid value for '--temp'", 2),
        (["generate"], "give the prompt with -p TEXT", 1),
        (["frobnicate"], "No such command 'frobnicate'", 2),
        (["generate", "-p", "  "], "the prompt is empty", 1),
        (["models", "pull", "gpt-17"], "unknown model 'gpt-17'; give a registry name", 1),
        (["models", "pull"], "name the model to pull: smollm2-135m (the default), qwen2.5", 1),
        (
            [
                "generate",
                "-m",
                "no-such-model",
                "-p",
                "x",
                "--prompt-cache-file",
                "/no/c.safetensors",
            ],
            "cannot save to /no/c.safetensors: the folder /no does not exist",
            1,
        ),
        (
            ["chat", "-m", "no-such-model", "-p", "x", "--prompt-cache-file", "/no/c.safetensors"],
            "the folder /no does not exist",
            1,
        ),
        (["generate", "-p", "x", "--prompt-cache-file", "c.bin"], "name it c.bin.safetensors", 1),
        (["chat", "--lazy", "turbo", "-p", "hi"], "unknown lazy preset 'turbo'", 1),
        (["bench", "--prompt-len", "2x"], "bad prompt length '2x'; write a token count", 1),
        (["bench", "--lazy", "turbo"], "unknown lazy preset 'turbo' for smollm2-135m", 1),
        (["bench", "--output", "xml"], "unknown --output 'xml'; choose one of: md, json, csv", 1),
        (["bench", "--lazy", " ,"], "no preset given to --lazy", 1),
        (["eval", "--families", "trivia"], "unknown task family 'trivia'; choose from: all", 1),
        (["calibrate", "--per-length", "2"], "Invalid value for '--per-length'", 2),
        (["eval", "--split", "test"], "unknown split 'test'", 1),
        (["generate", "--verbose", "False", "-p", "hi"], "got 'False' where the model goes", 1),
        (["chat", "-v", "false", "-p", "hi"], "lazymlx's flags take no value", 1),
        (["serve", "--max-tokens", "0"], "--max-tokens takes a whole number >= 1; got 0", 1),
    ],
)
def test_errors_are_one_line_without_traceback(capsys, argv, message, code):
    exit_code, out, err = run_main(capsys, *argv)
    assert exit_code == code
    assert err.startswith("error: ") and message in err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and out == ""


@pytest.mark.slow
def test_real_subprocesses(tiny_model_dir: Path):
    generated = subprocess.run(
        [LAZYMLX, "generate", "-m", str(tiny_model_dir), "-p", "the", "--raw", "-n", "3", "--json"],
        capture_output=True,
        text=True,
    )
    assert generated.returncode == 0, generated.stderr
    assert json.loads(generated.stdout)["prompt_tokens"] == 2
    piped = subprocess.run(
        [LAZYMLX, "chat", "-m", str(tiny_model_dir), "-n", "3"],
        input="the cat\n",
        capture_output=True,
        text=True,
    )
    assert piped.returncode == 0, piped.stderr
    assert "TTFT" in piped.stderr
    failed = subprocess.run(
        [LAZYMLX, "chat", "-m", "nope"], input="hi\n", capture_output=True, text=True
    )
    assert failed.returncode == 1
    assert len(failed.stderr.strip().splitlines()) == 1
    assert failed.stderr.startswith("error: unknown model 'nope'")


@pytest.mark.real_model
@pytest.mark.slow
def test_real_model_chat_in_a_subprocess(real):
    result = subprocess.run(
        [LAZYMLX, "chat", "-n", "24"],
        input="What is the capital of France?",
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert "Paris" in result.stdout
    assert "TTFT" in result.stderr


def test_conventions_help_version_and_bare_command(capsys):
    from lazymlx import __version__

    assert run_main(capsys, "-h")[0] == 0
    code, out, err = run_main(capsys)
    assert code == 0 and "chat" in out and "serve" in out and "error" not in err
    code, out, _ = run_main(capsys, "--version")
    assert code == 0 and out.strip() == f"lazymlx {__version__}"
    assert run_main(capsys, "generate", "-h")[0] == 0


def test_sampling_options_and_mlx_lm_names_work(tiny_model_dir: Path):
    common = ["generate", "-m", str(tiny_model_dir), "-p", "the cat", "-n", "6", "--json"]
    sampled = [
        runner.invoke(
            app,
            [*common, "--ignore-chat-template", "--temp", "1", "--top-k", "5", "--min-p", "0.05"]
            + ["--repetition-penalty", "1.2", "--seed", "7"],
        )
        for _ in range(2)
    ]
    assert sampled[0].exit_code == 0, sampled[0].output
    assert json.loads(sampled[0].stdout)["text"] == json.loads(sampled[1].stdout)["text"]
    templated = runner.invoke(app, [*common, "--system-prompt", "be brief"])
    assert templated.exit_code == 0, templated.output


def test_bad_combinations_and_bytes_are_one_error_line(capsys, tiny_model_dir: Path):
    code, _, err = run_main(
        capsys, "generate", "-m", str(tiny_model_dir), "-p", "x", "--raw", "--system", "s"
    )
    assert code == 1 and "--system needs the chat template" in err
    code, _, err = run_main(capsys, "generate", "-m", str(tiny_model_dir), "-p", "\udcff\udcfe bad")
    assert code == 1 and "not valid UTF-8 (byte 0xff" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_models_list_json(capsys):
    code, out, _ = run_main(capsys, "models", "list", "--json")
    rows = json.loads(out)
    assert code == 0 and "smollm2-135m" in [row["name"] for row in rows]
    assert {"name", "status", "description", "path", "calibrated"} <= set(rows[0])
    assert rows[0]["calibrated"] is True  # every registry model ships calibrated presets


@pytest.mark.parametrize("columns", ["80", None])
def test_models_list_is_readable_at_80_columns_and_piped(tmp_path: Path, columns):
    """A GGUF's conversion has a long name: it folds, and no other column is cut to `…`."""
    long_name = "gguf-Qwen2.5-Coder-0.5B-Instruct-Q8_0-1a2b3c4d5e-fp32"
    (tmp_path / long_name).mkdir()
    (tmp_path / long_name / "config.json").write_text("{}")
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["LAZYMLX_MODELS_DIR"] = str(tmp_path)
    if columns:
        env["COLUMNS"] = columns
    listed = subprocess.run(
        [LAZYMLX, "models", "list"], env=env, capture_output=True, text=True, check=True
    ).stdout  # piped: not a terminal
    lines = listed.splitlines()
    assert max(len(line) for line in lines) <= 80 and "…" not in listed
    header = next(line for line in lines if line.startswith("name"))
    assert header.split() == [
        "name",
        "family",
        "layers",
        "context",
        "kind",
        "presets",
        "on",
        "disk",
        "status",
    ]
    assert any(line.split()[0] == "qwen2.5-coder-0.5b" and "calibrated" in line for line in lines)
    first = next(i for i, line in enumerate(lines) if line.startswith("gguf"))
    assert "built-in" in lines[first]  # presets: the built-in rule, not calibrated on it
    caption = next(i for i, line in enumerate(lines) if line.startswith("lazymlx models pull"))
    assert "".join(line.split()[0] for line in lines[first:caption]) == long_name


def test_models_rm_frees_a_models_files_and_nothing_outside_the_cache(
    tmp_path: Path, monkeypatch, capsys
):
    from lazymlx.models.registry import MODELS_DIR_ENV

    root, outside = tmp_path / "models", tmp_path / "elsewhere"
    for folder in (root / "smollm2-135m-fp32", root / "other-model", outside):
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
    (root / "smollm2-135m.gguf").write_bytes(b"x" * 1000)
    (root / "judge").mkdir()  # the judge's scores: not a model
    (root / "qwen2.5-coder-0.5b-fp32").symlink_to(outside)  # a link: unlinked, not followed
    monkeypatch.setenv(MODELS_DIR_ENV, str(root))
    code, _, err = run_main(capsys, "models", "rm", "smollm2-135m")
    assert code == 0 and "removed " in err and "freed 0.00 GB" in err
    assert sorted(p.name for p in root.iterdir()) == [
        "judge", "other-model", "qwen2.5-coder-0.5b-fp32"
    ]  # fmt: skip
    assert run_main(capsys, "models", "rm", "qwen2.5-coder-0.5b")[0] == 0
    assert (outside / "config.json").exists() and not (root / "qwen2.5-coder-0.5b-fp32").exists()
    for name in ("judge", "../elsewhere", "smollm2-135m", str(outside)):
        code, _, err = run_main(capsys, "models", "rm", name)
        assert code == 1 and err.startswith(f"error: no model {name!r} in {root}")
        assert "other-model" in err and len(err.strip().splitlines()) == 1
    assert run_main(capsys, "models", "rm", "other-model")[0] == 0
    assert sorted(p.name for p in root.iterdir()) == ["judge"] and outside.exists()


def test_chat_reads_the_message_from_stdin_with_dash(tiny_model_dir: Path):
    result = runner.invoke(
        app, ["chat", "-m", str(tiny_model_dir), "-p", "-", "-n", "3"], input="hello there\n"
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.strip()


def test_piped_chat_input_is_read_a_line_at_a_time_with_its_commands(tiny_model_dir: Path):
    """`printf 'question\\n/quit\\n' | lazymlx chat`: each line is what a terminal's input
    line would send, a command obeyed, and /quit leaves (the line after it is never sent)."""
    script = "the cat\n/set max_tokens 2\nthe dog\n/quit\nnever sent\n"
    result = runner.invoke(app, ["chat", "-m", str(tiny_model_dir), "-n", "3", "-v"], input=script)
    assert result.exit_code == 0, result.output
    stats = [line for line in result.stderr.splitlines() if line.startswith("TTFT")]
    assert len(stats) == 2 and "max_tokens 2" in result.stderr
    assert " generation 3 tok" in stats[0] and " generation 2 tok" in stats[1]
    assert "type a message" not in result.stderr  # no opening line for a script


def test_prompt_cache_file_saves_and_reuses_a_context(tmp_path: Path, tiny_model_dir: Path):
    cache = tmp_path / "doc.safetensors"
    document = "a long document about cats and dogs " * 20
    args = ["generate", "-m", str(tiny_model_dir), "--raw", "-n", "4", "--json"]
    first = runner.invoke(app, [*args, "-p", document + "Q1", "--prompt-cache-file", str(cache)])
    assert first.exit_code == 0, first.output
    assert cache.exists() and json.loads(first.stdout)["cached_tokens"] == 0
    second = runner.invoke(app, [*args, "-p", document + "Q2", "--prompt-cache-file", str(cache)])
    plain = runner.invoke(app, [*args, "-p", document + "Q2", "--lazy", "off"])
    assert json.loads(second.stdout)["cached_tokens"] > 100
    # prompt_tokens is the whole prompt, cached or not, as OpenAI's usage counts it
    assert json.loads(second.stdout)["prompt_tokens"] == json.loads(plain.stdout)["prompt_tokens"]
    wrong_kind = runner.invoke(
        app, [*args, "-p", "x", "--lazy", "off", "--prompt-cache-file", str(cache)]
    )
    assert str(wrong_kind.exception).endswith(
        "holds lazymlx's engine's context (saved with --lazy default, which prunes), which "
        "stock mlx-lm (--lazy off) cannot continue; load it with --lazy default"
    )
    off_cache = tmp_path / "off.safetensors"
    for _ in range(2):
        again = runner.invoke(
            app,
            [*args, "-p", document + "Q2", "--lazy", "off", "--prompt-cache-file", str(off_cache)],
        )
    assert json.loads(again.stdout)["text"] == json.loads(plain.stdout)["text"]  # stock: exact


def test_chat_save_and_load_continue_a_conversation(tmp_path: Path, tiny, capsys):
    saved = tmp_path / "chat.safetensors"
    session = ChatSession(*tiny, max_tokens=3)
    files = chat_module.ChatFiles(session, "tiny", "off", None)
    repl(
        session,
        scripted(["hello", f"/save {saved}", "/save", "/load /nope.safetensors", "/bye"]),
        files,
    )
    assert saved.exists()
    err = capsys.readouterr().err
    assert "/save needs a file name" in err and "no context file at /nope.safetensors" in err
    fresh = ChatSession(*tiny, max_tokens=3)
    chat_module.ChatFiles(fresh, "tiny", "off", str(saved))  # --prompt-cache-file loads it
    assert fresh.messages == session.messages
    assert fresh.context.tokens == session.context.tokens
    other = chat_module.ChatFiles(ChatSession(*tiny, max_tokens=3), "other-model", "off", None)
    with pytest.raises(LazymlxError, match="holds a context of tiny, not other-model"):
        other.load(str(saved))


def test_a_bad_message_in_chat_is_an_error_line_and_the_chat_goes_on(tiny, capsys):
    session = ChatSession(*tiny, max_tokens=2)
    repl(session, scripted(["bad \udcff bytes", "hello", "/bye"]))
    err = capsys.readouterr().err
    assert "not valid UTF-8" in err
    assert [m["role"] for m in session.messages] == ["user", "assistant"]  # only the good turn


def test_calibrate_help_says_what_a_run_runs_and_how_long_it_takes(capsys):
    code, out, _ = run_main(capsys, "calibrate", "--help")
    text = " ".join(out.replace("│", " ").split())
    assert code == 0
    assert "stock mlx-lm" in text and "8-bit reference" in text and "candidate schedule" in text
    assert "23 s per 1k prompt tokens" in text and "hours" in text
    assert "--minutes N" in text and "Ctrl-C" in text and "--resume" in text


def test_help_shows_no_value_type_beside_flags(capsys):
    code, out, _ = run_main(capsys, "generate", "--help")
    assert code == 0 and "--json" in out and "--quiet" in out and "<bool>" not in out
    assert "<float>" in out  # options that take a value still show its type


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_chat_opens_with_model_preset_and_device(tiny_model_dir: Path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", _Terminal("/bye\n"))  # input() reads it
    code, _, err = run_main(capsys, "chat", "-m", str(tiny_model_dir))
    first = err.splitlines()[0]
    assert code == 0
    assert first.startswith(f"{tiny_model_dir} · preset default (not calibrated on it) · ")
    assert "(MLX CPU)" in first or "(MLX Metal)" in first
    assert first.endswith("type a message, /help for commands, /bye to leave")


@pytest.mark.parametrize("quiet", [False, True])
def test_a_long_prompt_shows_a_progress_bar_on_a_terminal(tiny, monkeypatch, quiet):
    screen = io.StringIO()
    terminal = Console(file=screen, force_terminal=True, width=120)
    monkeypatch.setattr(console, "err", terminal)
    monkeypatch.setattr(chat_module, "err", terminal)
    monkeypatch.setattr(console, "PROGRESS_MIN_TOKENS", 100)
    session = ChatSession(*tiny, lazy=LazyConfig(schedule=((0.5, 0.5),)), max_tokens=2)
    chat_module.answer(session, "the cat sat on the mat " * 10, quiet=quiet)
    drawn = screen.getvalue()
    assert ("tok/s" in drawn and "ETA" in drawn and "tokens" in drawn) != quiet
    assert ("TTFT" in drawn) != quiet  # the stats line
    screen.truncate(0)
    chat_module.answer(session, "short", quiet=quiet)  # under the threshold: no bar
    assert "tok/s" not in screen.getvalue().split("TTFT")[0]


def test_quiet_prints_the_answer_only(tiny_model_dir: Path):
    result = runner.invoke(
        app, ["generate", "-m", str(tiny_model_dir), "-p", "the", "--raw", "-n", "2", "-q"]
    )
    assert result.exit_code == 0 and result.stdout.strip() and result.stderr == ""


def test_eta_is_the_average_pace_so_far():
    task = Task(TaskID(0), "runs", 10, 4, _get_time=lambda: 100.0)
    task.start_time = 60.0
    assert str(console.Eta().render(task)) == "ETA 0:01:00"  # 40 s for 4, so 60 s for 6
    assert str(console.Eta().render(Task(TaskID(1), "x", 10, 0, _get_time=time.monotonic))) == (
        "ETA -:--:--"
    )


def test_only_lazymlxs_own_warnings_are_shown(capsys):
    with warnings.catch_warnings():
        console.warnings_as_lines()
        warnings.warn("from another library", DeprecationWarning, stacklevel=1)
        warnings.warn("a slow BLAS", LazymlxWarning, stacklevel=1)
    assert capsys.readouterr().err == "warning: a slow BLAS\n"
    assert os.environ["TRANSFORMERS_VERBOSITY"] == "error"


@pytest.mark.slow
def test_transformers_log_lines_stay_out_of_the_output(tiny_model_dir: Path, tmp_path: Path):
    """A prompt over the tokenizer's model_max_length makes transformers log a warning."""
    model = tmp_path / "short-tokenizer"
    shutil.copytree(tiny_model_dir, model)
    config = json.loads((model / "tokenizer_config.json").read_text())
    (model / "tokenizer_config.json").write_text(json.dumps(config | {"model_max_length": 8}))
    argv = ["generate", "-m", str(model), "-p", "the cat sat on the mat " * 4, "--raw", "-n", "2"]
    argv += ["--lazy", "off"]  # stock: no line about calibration
    result = subprocess.run(
        [sys.executable, "-c", f"from lazymlx.cli.app import main; main({argv!r})"],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "TRANSFORMERS_VERBOSITY"},
    )
    assert result.returncode == 0, result.stderr
    assert "Token indices" not in result.stderr and "transformers" not in result.stderr
    assert result.stderr.startswith("TTFT") and len(result.stderr.splitlines()) == 1


@pytest.mark.slow
def test_models_pull_takes_a_hub_id(tiny_model_dir: Path, tmp_path: Path):
    """From an offline, private Hugging Face cache holding the tiny model as a snapshot."""
    repo = tmp_path / "hf" / "models--mlx-community--tiny-llama"
    shutil.copytree(tiny_model_dir, repo / "snapshots" / ("0" * 40))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    env = dict(os.environ, HF_HUB_CACHE=str(tmp_path / "hf"), HF_HUB_OFFLINE="1")
    pulled = subprocess.run(
        [LAZYMLX, "models", "pull", "mlx-community/tiny-llama"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert pulled.returncode == 0, pulled.stderr
    assert pulled.stderr.startswith("ready: mlx-community/tiny-llama at ")


def test_a_busy_port_is_one_error_line_before_the_model_loads(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        code, out, err = run_main(capsys, "serve", "-m", "no-such-model", "--port", port)
    assert code == 1 and out == ""
    assert (
        err
        == f"error: port {port} on 127.0.0.1 is in use (another server?); pick another with --port\n"
    )


def test_an_unwritable_folder_for_a_context_file_is_refused_up_front(monkeypatch, tmp_path: Path):
    from lazymlx.contexts import check_save_path

    assert check_save_path(tmp_path / "c.safetensors") == tmp_path / "c.safetensors"
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # as for a user without rights
    with pytest.raises(LazymlxError, match=f"the folder {tmp_path} is not writable"):
        check_save_path(tmp_path / "c.safetensors")


def test_a_context_file_survives_an_unrelated_prompt(tmp_path: Path, tiny_model_dir: Path):
    cache = tmp_path / "doc.safetensors"
    document = "a long document about cats and dogs " * 20
    args = ["generate", "-m", str(tiny_model_dir), "--raw", "-n", "3", "--json"]
    first = runner.invoke(app, [*args, "-p", document + "Q1", "--prompt-cache-file", str(cache)])
    assert first.exit_code == 0, first.output
    saved = cache.read_bytes()
    other = runner.invoke(
        app, [*args, "-p", "an unrelated prompt", "--prompt-cache-file", str(cache)]
    )
    assert other.exit_code == 1 and "saving would replace that context" in str(other.exception)
    readonly = [*args, "-p", "an unrelated prompt", "--prompt-cache-file", str(cache)]
    answered = runner.invoke(app, [*readonly, "--prompt-cache-readonly"])
    assert answered.exit_code == 0, answered.output
    assert cache.read_bytes() == saved  # the document is still there, untouched
    again = runner.invoke(app, [*args, "-p", document + "Q2", "--prompt-cache-file", str(cache)])
    assert json.loads(again.stdout)["cached_tokens"] > 100  # a new question continues it


def test_the_work_share_never_exceeds_the_whole_and_hides_when_nothing_was_pruned(
    tmp_path: Path, tiny_model_dir: Path
):
    cache = tmp_path / "doc.safetensors"
    document = "a long document about cats and dogs " * 30
    lazy = ["--lazy", "fast", "--no-complete"]  # keep the file pruned: the question revives
    args = ["generate", "-m", str(tiny_model_dir), "--raw", "-n", "3", "--json", *lazy]
    first = json.loads(
        runner.invoke(app, [*args, "-p", document, "--prompt-cache-file", str(cache)]).stdout
    )
    assert 0 < first["work_share"] < 1 and first["revived_tokens"] == 0
    later = runner.invoke(app, [*args, "-p", document + " Q?", "--prompt-cache-file", str(cache)])
    reused = json.loads(later.stdout)
    assert reused["work_share"] <= 1 and reused["revived_tokens"] > 0
    short = json.loads(runner.invoke(app, [*args, "-p", "hello"]).stdout)
    assert "work_share" not in short  # nothing pruned: nothing to say


def test_the_stats_line_fits_80_columns():
    from lazymlx.cli.chat import stats_line
    from lazymlx.generation import LazyStats, Response

    lazy = LazyStats(0.48, 320, 1.2, (5410,), 0, 0)
    response = Response(
        text="", token=1, logprobs=None, from_draft=False, prompt_tokens=5410, prompt_tps=221.3,
        generation_tokens=64, generation_tps=14.2, peak_memory=0.62, finish_reason="stop",
        cached_tokens=5200, ttft_s=12.41, lazy=lazy,
    )  # fmt: skip
    line = stats_line(response)
    assert (
        line == "TTFT 12.4 s · 5410 tok (5200 cached) · 48% work, 320 revived · 14 tok/s · 0.6 GB"
    )
    assert len(line) <= 80
    assert "320 pruned tokens revived" in stats_line(response, verbose=True)
    stopped = stats_line(response, stopped=True)
    assert stopped.endswith("14 tok/s, stopped") and len(stopped) <= 80
    assert stats_line(response, verbose=True, stopped=True).endswith(" · answer stopped")
    response.lazy = LazyStats(1.0, 0, 1.0, (5410,), 0, 0)  # the engine ran whole
    assert " · pruned nothing · " in stats_line(response)
    assert " · pruned nothing (every token ran every layer) · " in stats_line(response, True)
    response.lazy = None  # stock mlx-lm: nothing to prune, nothing said
    assert "pruned" not in stats_line(response) + stats_line(response, verbose=True)


def test_usage_shows_the_stats_line_as_the_chat_prints_it():
    """usage.md's stats-line examples are what stats_line prints for their figures, in both
    forms; its cached-tokens one quotes a real chat's (it showed figures no run printed)."""
    from lazymlx.cli.chat import stats_line
    from lazymlx.generation import LazyStats, Response

    usage = " ".join(
        (Path(__file__).resolve().parents[1] / "docs" / "usage.md").read_text().split()
    )
    response = Response(
        text="", token=1, logprobs=None, from_draft=False, prompt_tokens=541, prompt_tps=221.3,
        generation_tokens=64, generation_tps=14.2, peak_memory=0.62, finish_reason="stop",
        cached_tokens=520, ttft_s=2.41, lazy=LazyStats(0.48, 0, 1.0, (541,), 0, 0),
    )  # fmt: skip
    assert f"`{stats_line(response)}`" in usage
    response.prompt_tokens, response.cached_tokens = 3320, 3295
    assert "`3320 tok (3295 cached)`" in usage and "3320 tok (3295 cached)" in stats_line(response)
    verbose = stats_line(response, verbose=True)
    assert "`prompt 3320 tok (3295 cached)`" in usage and "prompt 3320 tok (3295 cached)" in verbose


def test_the_model_may_come_first_as_ollama_takes_it(tiny_model_dir: Path):
    result = runner.invoke(app, ["generate", str(tiny_model_dir), "-p", "hi", "-n", "2", "--json"])
    assert result.exit_code == 0, result.output
    chat = runner.invoke(app, ["chat", str(tiny_model_dir), "-p", "hi", "-n", "2"])
    assert chat.exit_code == 0, chat.output
    both = runner.invoke(app, ["generate", str(tiny_model_dir), "-m", "other", "-p", "hi"])
    assert "two models named" in str(both.exception)
    digits = runner.invoke(app, ["generate", "-m", "100", "-p", "hi"])
    assert "the most tokens to generate is -n (--max-tokens), e.g. -n 100" in str(digits.exception)


def test_a_file_without_lazymlxs_metadata_is_refused(tmp_path: Path, tiny_model_dir: Path):
    from mlx_lm.models.cache import make_prompt_cache, save_prompt_cache

    from lazymlx import load
    from lazymlx.contexts import load_context

    model, _ = load(str(tiny_model_dir))
    bare = tmp_path / "bare.safetensors"
    save_prompt_cache(str(bare), make_prompt_cache(model))  # mlx-lm's own: no metadata
    with pytest.raises(LazymlxError, match=r"lacks lazymlx's metadata \(model, preset, tokens\)"):
        load_context(bare, model, str(tiny_model_dir), None)


def test_an_uncalibrated_model_says_so_in_one_dim_line(tiny_model_dir: Path):
    from lazymlx.cli.notes import _first_time

    _first_time(str(tiny_model_dir))  # used before: its first-use line is test_first_use's
    result = runner.invoke(app, ["generate", str(tiny_model_dir), "-p", "hi", "-n", "2"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if "calibrat" in line]
    assert lines == [
        f"{tiny_model_dir} has no calibrated presets: 'default' is a built-in rule, chosen on "
        f"other models, not checked on this one; `lazymlx calibrate -m {tiny_model_dir}` fits "
        "one to it"
    ]
    result = runner.invoke(
        app, ["generate", str(tiny_model_dir), "-p", "hi", "-n", "2", "--lazy", "fast"]
    )
    lines = [line for line in result.stderr.splitlines() if "calibrat" in line]
    assert lines == [
        f"{tiny_model_dir} has no calibrated presets: 'fast' is a built-in rule, chosen on "
        f"other models, not checked on this one; `lazymlx calibrate -m {tiny_model_dir}` fits "
        "one to it"
    ]
    stock = runner.invoke(
        app, ["generate", str(tiny_model_dir), "-p", "hi", "-n", "2", "--lazy", "off"]
    )
    assert "calibrat" not in stock.stderr


def test_help_paragraphs_wrap_at_the_terminal_not_at_the_docstring():
    """A docstring's line breaks would otherwise survive into --help beside rich's own wrapping."""
    result = runner.invoke(app, ["calibrate", "--help"], env={"COLUMNS": "1000"})
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if "It runs the cheapest" in line)
    assert "each dropped as soon as its losses" in line  # past the docstring's third line
