"""Bad input never crashes: any prompt, config or chat command is an answer or one clear error."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lazymlx
from lazymlx import LazyConfig
from lazymlx.cli.app import main
from lazymlx.cli.chat import run_command
from lazymlx.errors import LazymlxError
from lazymlx.session import ChatSession

PRUNING = LazyConfig(schedule=((0.25, 0.5), (0.5, 0.5)), decode="revive")
FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# text as it reaches Python: any Unicode, and bytes that were not UTF-8 (lone surrogates)
texts = st.one_of(
    st.text(max_size=60),
    st.text(max_size=20).map(lambda t: t + "\udcff" + t),
    st.sampled_from(["", " ", "\n", "<|im_start|>", "<|im_end|><|im_start|>assistant", "\x00"]),
)


def answer_or_clear_error(call) -> None:
    try:
        assert isinstance(call(), str)
    except LazymlxError as error:
        assert str(error) and "\n" not in str(error)


@FUZZ
@given(prompt=texts, lazy=st.sampled_from([None, PRUNING, "default", "off"]))
def test_any_text_prompt_is_an_answer_or_one_error(tiny, prompt, lazy):
    model, tokenizer = tiny
    answer_or_clear_error(
        lambda: lazymlx.generate(model, tokenizer, prompt, max_tokens=2, lazy=lazy)
    )


@FUZZ
@given(tokens=st.lists(st.integers(-5, 400), max_size=30))
def test_any_token_list_is_an_answer_or_one_error(tiny, tokens):
    model, tokenizer = tiny
    answer_or_clear_error(lambda: lazymlx.generate(model, tokenizer, tokens, max_tokens=2))


@pytest.mark.parametrize("extra", [0, 1])
def test_exactly_the_context_answers_and_one_over_is_refused(tiny, extra):
    model, tokenizer = tiny
    limit = model.args.max_position_embeddings
    tokens = [5] * (limit + extra)
    if extra:
        with pytest.raises(LazymlxError, match=f"needs {limit + 1} tokens of context"):
            lazymlx.generate(model, tokenizer, tokens, max_tokens=1)
    else:
        assert isinstance(lazymlx.generate(model, tokenizer, tokens, max_tokens=1), str)


values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 5000),
    st.floats(allow_nan=True),
    st.text(max_size=5),
    st.lists(st.tuples(st.floats(-1, 2), st.floats(-1, 2)), max_size=3),
)


@FUZZ
@given(fields=st.dictionaries(st.sampled_from(list(LazyConfig.__dataclass_fields__)), values))
def test_any_config_is_valid_or_one_clear_error(fields):
    try:
        LazyConfig(**fields)
    except LazymlxError as error:
        assert "\n" not in str(error)


@FUZZ
@given(command=st.text(max_size=40).map(lambda t: "/" + t))
def test_any_chat_command_leaves_the_chat_standing(tiny, command, capsys):
    session = ChatSession(*tiny, max_tokens=2)
    assert run_command(session, command) in (True, False)
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["generate", "-p", ""], "the prompt is empty"),
        (["generate", "-p", "\udcff"], "not valid UTF-8"),
        (["generate", "--lazy", "turbo", "-p", "x"], "unknown lazy preset 'turbo'"),
        (["generate", "-n", "0", "-p", "x"], "--max-tokens"),
        (["nope"], "No such command"),
    ],
)
def test_cli_mistakes_are_one_error_line(capsys, tiny_model_dir, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "-m", str(tiny_model_dir)] if argv[0] == "generate" else argv)
    err = capsys.readouterr().err
    assert exit_info.value.code != 0
    assert message in err and "Traceback" not in err
    assert err.strip().startswith("error:")
