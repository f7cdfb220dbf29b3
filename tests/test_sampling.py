"""The one request check (lazymlx/sampling.py): its limits, and every door a request comes in by
(the CLI's flags, the chat's /set, the server's fields, `LLM.submit`) refusing the same values
in the same words, before any work."""

from __future__ import annotations

import json
import math

import pytest
from test_cli import run_main

from lazymlx.cli.chat import run_command
from lazymlx.errors import LazymlxError
from lazymlx.llm import LLM
from lazymlx.sampling import LIMITS, check_sampling, check_value, parse_value
from lazymlx.server import bodies
from lazymlx.session import ChatSession
from lazymlx.worker import GENERATION_THREAD

# (the name stream_generate takes, a value outside its limits, what the refusal says it takes)
BAD = [
    ("temp", -1.0, "a number >= 0 (0: greedy)"),
    ("top_p", 0.0, "a number above 0, at most 1 (1: every token)"),
    ("top_k", -2, "a whole number >= 0 (0: all)"),
    ("min_p", 1.5, "a number from 0 to 1 (0: none)"),
    ("repetition_penalty", 0.0, "a number above 0 (1: none), e.g. 1.1"),
    ("max_tokens", 0, "a whole number >= 1"),
]
FLAGS = {"temp": "--temp", "top_p": "--top-p", "top_k": "--top-k", "min_p": "--min-p"}
FLAGS |= {"repetition_penalty": "--repetition-penalty", "max_tokens": "--max-tokens"}
FIELDS = {"temp": "temperature"}  # the server's (OpenAI's) name where it differs


@pytest.mark.parametrize(
    ("value", "fine"),
    [(0.5, True), (0, True), (math.nan, False), (math.inf, False), (True, False), ("0.5", False)],
)
def test_a_value_is_a_finite_number_within_its_limits(value, fine):
    if fine:
        check_value("temp", value)
    else:
        with pytest.raises(LazymlxError, match="temp takes a number >= 0"):
            check_value("temp", value)


def test_whole_numbers_seed_and_logit_bias():
    with pytest.raises(LazymlxError, match="top_k takes a whole number"):
        check_value("top_k", 2.5)
    with pytest.raises(LazymlxError, match=r"seed takes a whole number from 0 to 2\^63 - 1"):
        check_value("seed", -1)
    check_value("top_k", 10**400)  # a whole number of any size (no float overflow)
    with pytest.raises(LazymlxError, match=r"logit_bias\[7\] takes a number from -100 to 100"):
        check_sampling({"logit_bias": {7: 101.0}})
    check_sampling({"repetition_penalty": None, "prompt_cache": object()})  # None: the default


def test_parse_value_says_what_a_setting_takes():
    assert parse_value("top_k", "40", "/set top_k") == 40
    with pytest.raises(LazymlxError, match=r"/set top_k takes a whole number >= 0 \(0: all\)$"):
        parse_value("top_k", "", "/set top_k")
    with pytest.raises(LazymlxError, match="/set min_p takes .*; got 'nan'"):
        parse_value("min_p", "nan", "/set min_p")


@pytest.mark.parametrize(("name", "value", "takes"), BAD)
def test_the_cli_refuses_a_bad_value_before_loading_the_model(capsys, name, value, takes):
    flag = FLAGS[name]
    for command in ("generate", "chat"):
        # a model that does not exist: the flag is refused before anything looks for it
        argv = [command, "-m", "no-such-model", "-p", "hi", flag, str(value)]
        code, out, err = run_main(capsys, *argv)
        assert code == 1 and out == ""
        assert err.strip().splitlines() == [f"error: {flag} takes {takes}; got {value!r}"]


def test_the_cli_refuses_a_seed_mlx_cannot_take(capsys):
    code, _, err = run_main(capsys, "generate", "-m", "no-such-model", "-p", "hi", "--seed", "-1")
    assert code == 1 and err.startswith("error: --seed takes a whole number from 0")


@pytest.mark.parametrize(("name", "value", "takes"), BAD)
def test_the_chat_refuses_the_same_values(tiny, capsys, name, value, takes):
    session = ChatSession(*tiny, max_tokens=3)
    before = dict(session.generation)
    run_command(session, f"/set {name} {value}")
    assert f"error: /set {name} takes {takes}; got '{value}'" in capsys.readouterr().err
    assert session.generation == before


@pytest.mark.parametrize(("name", "value", "takes"), BAD)
def test_the_server_refuses_the_same_values(name, value, takes):
    field = FIELDS.get(name, name)
    body = {"messages": [{"role": "user", "content": "hi"}], field: value}
    with pytest.raises(bodies.Refusal) as refused:
        bodies.parse_body(json.dumps(body).encode(), bodies.ChatBody, chat=True)
    assert (refused.value.status, refused.value.param) == (400, field)
    assert refused.value.message == f"{field} takes {takes}; got {value!r}"


def test_every_limited_field_of_the_server_is_a_limit():
    assert set(bodies.LIMITED_FIELDS.values()) <= set(LIMITS) | {"logit_bias"}


@pytest.fixture(scope="module")
def llm(tiny_model_dir):
    with LLM(str(tiny_model_dir), lazy=None, idle=False) as served:
        yield served


@pytest.mark.parametrize(("name", "value", "takes"), BAD)
def test_llm_submit_raises_before_queueing(llm, monkeypatch, name, value, takes):
    queued = []
    monkeypatch.setattr(GENERATION_THREAD, "submit", queued.append)
    options = {"max_tokens": 2} | {name: value}
    with pytest.raises(LazymlxError) as refused:
        llm.submit("hi", **options)
    assert str(refused.value) == f"{name} takes {takes}; got {value!r}"
    with pytest.raises(LazymlxError, match="^seed takes"):
        llm.submit("hi", seed=-1)
    assert queued == []
