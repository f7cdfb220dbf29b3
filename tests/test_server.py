"""`lazymlx serve` over loopback, driven by the real `openai` client (and raw HTTP for bad input)."""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import openai
import pytest
import uvicorn
from typer.testing import CliRunner

import lazymlx
from lazymlx import LazyConfig
from lazymlx.cli.app import app
from lazymlx.llm import LLM
from lazymlx.server.app import create_app, listen
from lazymlx.server.endpoints import Limits
from lazymlx.server.pending import PendingRequest

PRUNING = LazyConfig(schedule=((0.25, 0.5), (0.5, 0.5)), decode="revive")
CHAT = [{"role": "user", "content": "the cat sat on the mat"}]


@contextmanager
def running(app) -> Iterator[str]:
    """The app served on a free loopback port, in a thread stopped at the end; its base URL."""
    sock = listen("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.fixture(scope="module")
def llm(tiny_model_dir):
    return LLM(str(tiny_model_dir), lazy=PRUNING)


@pytest.fixture(scope="module")
def server(llm):
    requests = []  # every stream the server starts, to check what happened to it
    submit = llm.submit
    llm.submit = lambda *a, **k: requests.append(submit(*a, **k)) or requests[-1]
    with running(create_app(llm, Limits(max_tokens=300, max_request_bytes=20_000))) as url:
        yield url, requests
    llm.submit = submit


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=server[0] + "/v1", api_key="unused", max_retries=0, timeout=60)


def post(url: str, body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_health_and_models(server, client):
    with urllib.request.urlopen(server[0] + "/health", timeout=10) as response:
        assert json.loads(response.read()) == {"status": "ok"}
    assert [m.id for m in client.models.list().data] == [server_model(server)]


def server_model(server) -> str:
    with urllib.request.urlopen(server[0] + "/v1/models", timeout=10) as response:
        return json.loads(response.read())["data"][0]["id"]


def test_chat_streamed_and_not_give_one_answer_and_a_conversation_reuses_its_context(client):
    whole = client.chat.completions.create(model="m", messages=CHAT, max_tokens=8)
    answer = whole.choices[0].message.content
    assert whole.usage.completion_tokens == 8 and whole.choices[0].finish_reason == "length"
    assert whole.usage.model_extra["ttft_s"] > 0
    chunks = list(
        client.chat.completions.create(
            model="m",
            messages=CHAT,
            max_tokens=8,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == answer
    assert chunks[-1].usage.completion_tokens == 8
    follow = [*CHAT, {"role": "assistant", "content": answer}, {"role": "user", "content": "why"}]
    second = client.chat.completions.create(model="m", messages=follow, max_tokens=4)
    assert second.usage.prompt_tokens_details.cached_tokens >= whole.usage.prompt_tokens


def turn(client, history: list[dict], text: str, lazy: str | None):
    """One chat turn of a conversation: the reply, its answer appended to the history."""
    history.append({"role": "user", "content": text})
    extra = {} if lazy is None else {"lazy": lazy}
    reply = client.chat.completions.create(
        model="m", messages=history, max_tokens=4, extra_body=extra
    )
    history.append({"role": "assistant", "content": reply.choices[0].message.content})
    return reply


@pytest.mark.parametrize("lazy", [None, "off"])
def test_conversations_sharing_a_system_prompt_each_keep_their_history(tiny_model_dir, lazy):
    """A, two turns; B, the same long system prompt; A's third turn finds its whole history
    cached (B starts from a fork of the shared prefix) and answers as if B never came."""
    system = {"role": "system", "content": "You answer briefly and check every fact twice. " * 14}
    no_idle = LazyConfig(schedule=PRUNING.schedule, decode="revive", complete="never")
    runs = {}
    for with_b in (True, False):
        llm = LLM(str(tiny_model_dir), lazy=no_idle)
        with running(create_app(llm, Limits(max_tokens=16))) as url:
            client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
            a = [system]
            turn(client, a, "the cat sat on the mat", lazy)
            second = turn(client, a, "and then?", lazy)
            b = turn(client, [system], "tell me about dogs", lazy) if with_b else None
            runs[with_b] = (second, b, turn(client, a, "why?", lazy))
        llm.close()
    (second, b, third), (_, _, alone) = runs[True], runs[False]
    assert third.usage.prompt_tokens_details.cached_tokens >= second.usage.prompt_tokens
    shared = len(llm.tokenizer.apply_chat_template([system]))
    assert b.usage.prompt_tokens_details.cached_tokens >= shared
    assert third.choices[0].message.content == alone.choices[0].message.content


def test_completions_take_the_lazy_preset_per_request(client):
    stock = client.completions.create(
        model="m", prompt="once upon a time", max_tokens=6, extra_body={"lazy": "off"}
    )
    assert "work_share" not in stock.usage.model_extra  # stock: nothing pruned, nothing to say
    assert stock.choices[0].text
    with pytest.raises(openai.BadRequestError, match="unknown lazy preset 'turbo'"):
        client.completions.create(model="m", prompt="x", max_tokens=2, extra_body={"lazy": "turbo"})


def test_stop_strings_end_the_answer(client):
    full = client.completions.create(model="m", prompt="a b c", max_tokens=12).choices[0].text
    stop = full[3:5]
    cut = client.completions.create(model="m", prompt="a b c", max_tokens=12, stop=[stop])
    assert cut.choices[0].text == full[: full.index(stop)]
    assert cut.choices[0].finish_reason == "stop"


def test_concurrent_clients_are_queued_and_none_is_lost(client):
    """Stock requests (reusing a kept prefix is exact there), so every answer is predictable."""
    prompts = [f"client {i} says" for i in range(5)]

    def complete(prompt: str) -> str:
        reply = client.completions.create(
            model="m", prompt=prompt, max_tokens=5, extra_body={"lazy": "off"}
        )
        return reply.choices[0].text

    expected = {p: complete(p) for p in prompts}
    answers: dict[str, str] = {}

    def ask(prompt: str) -> None:
        answers[prompt] = complete(prompt)

    threads = [threading.Thread(target=ask, args=(p,)) for p in prompts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert answers == expected


def test_a_client_gone_mid_stream_frees_the_generation_thread(server, client):
    _, requests = server
    stream = client.chat.completions.create(model="m", messages=CHAT, max_tokens=300, stream=True)
    for received, _ in enumerate(stream):
        if received == 3:
            break
    stream.close()
    gone = requests[-1]
    deadline = time.monotonic() + 30
    while not gone.finished and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone.cancelled and gone.finished
    assert gone.generated < 300  # stopped early, not at max_tokens
    again = client.chat.completions.create(model="m", messages=CHAT, max_tokens=3)
    assert again.usage.completion_tokens == 3


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b"{not json", 400, "not valid JSON"),
        (b'{"messages": []}', 400, "messages"),
        (
            b'{"messages": [{"role": "user", "content": "hi"}], "temperature": -1}',
            400,
            "temperature",
        ),
        (
            json.dumps({"messages": [{"role": "user", "content": "x" * 30_000}]}).encode(),
            413,
            "limit",
        ),
        (b'{"messages": [{"role": "user", "content": "bad \\udcff"}]}', 400, "UTF-8"),
        (b'{"messages": [{"role": "user", "content": "hi"}], "seed": -1}', 400, "seed"),
        (
            b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}',
            400,
            "max_tokens takes a whole number >= 1; got 0",  # the CLI's words for -n 0
        ),
        (
            b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": "many"}',
            400,
            "max_tokens takes a whole number >= 1; got 'many'",  # not Pydantic's
        ),
        (
            b'{"messages": [{"role": "user", "content": "hi"}], "top_p": "x"}',
            400,
            "top_p takes a number above 0, at most 1 (1: every token); got 'x'",
        ),
        (b"\xff\xfe{}", 400, "not valid JSON"),
        (
            b'{"messages": [{"role": "user", "content": "hi"}], "stop": ["a","b","c","d","e"]}',
            400,
            "stop",
        ),
    ],
)
def test_bad_requests_get_an_openai_error_and_the_server_lives_on(server, body, status, message):
    code, reply = post(server[0] + "/v1/chat/completions", body)
    assert code == status
    assert message in reply["error"]["message"]
    assert set(reply["error"]) == {"message", "type", "param", "code"}  # OpenAI's shape
    ok, _ = post(server[0] + "/v1/completions", b'{"prompt": "still up", "max_tokens": 2}')
    assert ok == 200


def test_stop_strings_cut_at_the_earliest_and_empty_ones_are_ignored():
    from lazymlx.server.endpoints import StopFinder

    finder = StopFinder(["zz", "b"])
    assert finder.feed("a") == ("", False)  # held back: it may begin "zz"
    assert finder.feed("bzz") == ("a", True)
    assert StopFinder("").feed("abc") == ("abc", False)


def test_a_chunked_oversize_body_is_refused(server):
    def chunks():  # 24 kB in three chunks, no Content-Length: over the 20 kB limit
        for _ in range(3):
            yield b" " * 8000

    request = urllib.request.Request(
        server[0] + "/v1/completions", chunks(), {"Content-Type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 413


def get(url: str) -> tuple[int, dict, dict]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, json.loads(response.read()), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read()), dict(error.headers)


def test_a_model_by_id_and_unknown_routes_get_openai_errors(server, client):
    name = server_model(server)
    assert client.models.retrieve(name).id == name
    with pytest.raises(openai.NotFoundError, match="not served here") as missing:
        client.models.retrieve("nope")
    assert missing.value.body["code"] == "model_not_found"
    code, reply, _ = get(server[0] + "/v1/nope")
    assert code == 404 and reply["error"]["type"] == "invalid_request_error"
    assert "no such endpoint: GET /v1/nope" in reply["error"]["message"]
    code, reply, headers = get(server[0] + "/v1/chat/completions")
    assert code == 405 and "use POST" in reply["error"]["message"]
    assert headers["allow"] == "POST"


def first_token_text(client, **options) -> list[str]:
    reply = client.completions.create(
        model="m", prompt="the cat sat", max_tokens=4, logprobs=0, **options
    )
    return reply.choices[0].logprobs.tokens


def test_logprobs_in_chat_and_completions_streamed_or_not(client):
    whole = client.chat.completions.create(
        model="m", messages=CHAT, max_tokens=6, logprobs=True, top_logprobs=3
    )
    entries = whole.choices[0].logprobs.content
    assert len(entries) == whole.usage.completion_tokens == 6
    for entry in entries:  # greedy: the chosen token is the likeliest
        assert [t.logprob for t in entry.top_logprobs] == sorted(
            (t.logprob for t in entry.top_logprobs), reverse=True
        )
        assert len(entry.top_logprobs) == 3 and entry.logprob == entry.top_logprobs[0].logprob
        assert entry.logprob < 0 and bytes(entry.bytes).decode(errors="replace") == entry.token
    text = b"".join(bytes(e.bytes) for e in entries).decode(errors="replace")
    assert text.strip() == whole.choices[0].message.content.strip()
    chunks = list(
        client.chat.completions.create(
            model="m", messages=CHAT, max_tokens=6, logprobs=True, top_logprobs=3, stream=True
        )
    )
    streamed = [
        e
        for c in chunks
        if c.choices and c.choices[0].logprobs
        for e in c.choices[0].logprobs.content
    ]
    assert [e.token for e in streamed] == [e.token for e in entries]
    assert [e.logprob for e in streamed] == pytest.approx([e.logprob for e in entries], abs=1e-4)

    completion = client.completions.create(
        model="m", prompt="the cat sat", max_tokens=5, logprobs=2
    )
    probs = completion.choices[0].logprobs
    assert len(probs.tokens) == len(probs.token_logprobs) == len(probs.top_logprobs) == 5
    assert probs.text_offset == sorted(probs.text_offset) and probs.text_offset[0] == 0
    for token, logprob, top in zip(
        probs.tokens, probs.token_logprobs, probs.top_logprobs, strict=True
    ):
        assert top[token] == logprob and len(top) <= 3
    pieces = client.completions.create(
        model="m", prompt="the cat sat", max_tokens=5, logprobs=2, stream=True
    )
    assert [
        t for c in pieces for t in (c.choices[0].logprobs.tokens if c.choices[0].logprobs else [])
    ] == probs.tokens


def test_penalties_and_logit_bias_are_mlx_lms_own(server, client, tiny):
    """The tiny model repeats one token greedily; each option changes that as mlx-lm's
    processors do when called directly."""
    model, tokenizer = tiny
    prompt = "the cat sat"
    options = [
        {"presence_penalty": 2.0},
        {"frequency_penalty": 2.0},
        {"frequency_penalty": 1.5, "presence_penalty": -1.0},
        {"logit_bias": {50: 100.0}},
    ]
    plain = (
        client.completions.create(
            model="m", prompt=prompt, max_tokens=12, extra_body={"lazy": "off"}
        )
        .choices[0]
        .text
    )
    for option in options:
        reply = (
            client.completions.create(
                model="m", prompt=prompt, max_tokens=12, extra_body={"lazy": "off"}, **option
            )
            .choices[0]
            .text
        )
        direct = lazymlx.generate(model, tokenizer, prompt, max_tokens=12, **option)
        assert reply == direct != plain
    assert set(direct) == {tokenizer.decode([50])}  # the biased token, every time


CHAT_REFUSALS = [
    ("n", 2),
    ("tools", [{"type": "function", "function": {"name": "f", "parameters": {}}}]),
    ("tool_choice", "auto"),
    ("functions", [{"name": "f", "parameters": {}}]),
    ("function_call", "auto"),
    ("response_format", {"type": "json_object"}),
    ("audio", {"voice": "alloy", "format": "wav"}),
    ("modalities", ["text", "audio"]),
    ("prediction", {"type": "content", "content": "x"}),
    ("web_search_options", {}),
    ("reasoning_effort", "low"),
    ("verbosity", "low"),
    ("store", True),
]
COMPLETION_REFUSALS = [("n", 3), ("best_of", 2), ("echo", True), ("suffix", "the end")]


@pytest.mark.parametrize(("field", "value"), CHAT_REFUSALS)
def test_chat_fields_not_done_are_refused_naming_them(client, field, value):
    with pytest.raises(openai.BadRequestError, match=f"{field}: this server") as refused:
        client.chat.completions.create(model="m", messages=CHAT, max_tokens=2, **{field: value})
    assert refused.value.body["param"] == field


@pytest.mark.parametrize(("field", "value"), COMPLETION_REFUSALS)
def test_completion_fields_not_done_are_refused_naming_them(client, field, value):
    with pytest.raises(openai.BadRequestError, match=f"{field}: this server"):
        client.completions.create(model="m", prompt="x", max_tokens=2, **{field: value})


def test_no_op_values_and_labels_are_accepted_and_other_input_refused(client):
    reply = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": [{"type": "text", "text": "the cat"}]}],
        max_tokens=2,
        n=1,
        tools=[],
        response_format={"type": "text"},
        modalities=["text"],
        store=False,
        user="someone",
        metadata={"app": "test"},
        service_tier="auto",
        stream_options=None,
    )
    assert reply.usage.completion_tokens == 2
    assert (
        client.completions.create(
            model="m", prompt=["the cat"], max_tokens=2, echo=False, best_of=1, user="u"
        )
        .choices[0]
        .text
    )
    refusals = [
        ({"extra_body": {"foo": 1}}, "unknown field 'foo'"),
        ({"logprobs": False, "top_logprobs": 2}, "top_logprobs needs logprobs"),
        ({"presence_penalty": 3}, "presence_penalty"),
        ({"logit_bias": {"100000": 5}}, "not in the model's vocabulary"),
        ({"stream": True, "stream_options": {"include_usage": True, "x": 1}}, "stream_options.x"),
        ({"extra_body": {"echo": True}}, "unknown field 'echo'"),  # a completions field
    ]
    for options, message in refusals:
        with pytest.raises(openai.BadRequestError, match=message):
            client.chat.completions.create(model="m", messages=CHAT, max_tokens=2, **options)
    image = {"type": "image_url", "image_url": {"url": "data:,"}}
    with pytest.raises(
        openai.BadRequestError, match=r"messages\[0\].content\[1\] is an 'image_url'"
    ):
        client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": [{"type": "text", "text": "see"}, image]}],
            max_tokens=2,
        )
    with pytest.raises(openai.BadRequestError, match="one prompt per request"):
        client.completions.create(model="m", prompt=["a", "b"], max_tokens=2)


def test_each_request_is_logged_once_with_what_it_cost(client, caplog):
    caplog.set_level(logging.INFO, logger="lazymlx.server")
    reply = client.completions.create(model="m", prompt="the cat sat", max_tokens=3)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="m", prompt="x", max_tokens=2, n=2)
    lines = [r.getMessage() for r in caplog.records if r.name == "lazymlx.server"]
    done = [line for line in lines if line.startswith(reply.id)]
    assert len(done) == 1
    usage = reply.usage
    assert (
        f"completions 200 · prompt {usage.prompt_tokens} tok, "
        f"{usage.prompt_tokens_details.cached_tokens} cached · TTFT " in done[0]
    )
    assert " · 3 tok out · length · " in done[0]
    assert ("% of the work" in done[0]) == ("work_share" in usage.model_extra)
    # the engine ran (the server's preset prunes): a prompt it ran whole says so
    assert ("pruned nothing" in done[0]) == ("work_share" not in usage.model_extra)
    assert any(line.startswith("POST /v1/completions 400 · n: this server") for line in lines)


def sse_lines(url: str, body: dict) -> Iterator[str]:
    """A stream's raw lines, SSE comments included (which clients skip)."""
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.request(
        "POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"}
    )
    response = connection.getresponse()
    try:
        for raw in response:
            if raw.strip():
                yield raw.decode().strip()
    finally:
        connection.close()


def test_a_long_prefill_sends_keepalives_and_logs_its_progress(llm, client, caplog):
    """A prefill slowed to ~1.5 s (a sleep per progress report) and a 0.2 s keep-alive."""
    caplog.set_level(logging.INFO, logger="lazymlx.server")
    submit = llm.submit

    def slow_submit(*args, on_progress, **kwargs):
        def slow(done: int, total: int) -> None:
            time.sleep(0.3)
            on_progress(done, total)

        return submit(*args, on_progress=slow, **kwargs)

    llm.submit = slow_submit
    message = [{"role": "user", "content": "a prompt that takes a while " * 12}]
    try:
        with running(create_app(llm, Limits(keepalive_s=0.2))) as url:
            lines = list(sse_lines(url, {"messages": message, "max_tokens": 3, "stream": True}))
            slow = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=60)
            chunks = slow.chat.completions.create(
                model="m", messages=message, max_tokens=3, stream=True, extra_body={"lazy": "off"}
            )
            text = "".join(c.choices[0].delta.content or "" for c in chunks)
    finally:
        llm.submit = submit
    first_text = next(
        i for i, line in enumerate(lines) if '"content": "' in line and '"role"' not in line
    )
    keepalives = [line for line in lines[:first_text] if line.startswith(": keepalive")]
    assert len(keepalives) >= 3, lines
    assert any("prefill" in line for line in keepalives)
    assert lines[-1] == "data: [DONE]"
    assert (
        text
        == client.chat.completions.create(
            model="m", messages=message, max_tokens=3, extra_body={"lazy": "off"}
        )
        .choices[0]
        .message.content
    )
    logged = [r.getMessage() for r in caplog.records if r.name == "lazymlx.server"]
    assert any(" prefill " in line and " tokens, " in line for line in logged)


def test_waiting_gives_a_prefills_size_until_it_reports_progress():
    """Stock mlx-lm reports a prefill per 2,048-token chunk: a 1,571-token prompt's whole step
    was logged and kept alive as `prefill 0/1571 tokens`."""

    async def waiting(progress: tuple[int, int] | None) -> str:
        request = PendingRequest("chatcmpl-1", "chat", keepalive_s=5.0)
        request.progress = progress
        return request.waiting()

    assert asyncio.run(waiting(None)) == "queued"
    assert asyncio.run(waiting((0, 1571))) == "prefill of 1571 tokens"
    assert asyncio.run(waiting((406, 2437))) == "prefill 406/2437 tokens"


def test_prompt_tokens_and_finish_reason_agree_across_cli_api_and_server(
    client, tiny_model_dir, tmp_path
):
    """Two raw prompts, the second continuing the first, through each surface (stock mlx-lm, so
    reusing the first's context is exact): the same whole-prompt count, cached part and end."""
    first, second = "the cat sat on the mat", "the cat sat on the mat and the dog"
    cache = tmp_path / "context.safetensors"
    args = ["generate", "-m", str(tiny_model_dir), "--raw", "-n", "3", "--json", "--lazy", "off"]
    for prompt in (first, second):
        result = CliRunner().invoke(app, [*args, "--prompt-cache-file", str(cache), "-p", prompt])
        cli = json.loads(result.stdout)
    api = LLM(str(tiny_model_dir), lazy=None)
    api.generate(first, max_tokens=3)
    stream = api.submit(second, max_tokens=3)
    stream.result()
    for prompt in (first, second):
        reply = client.completions.create(
            model="m", prompt=prompt, max_tokens=3, extra_body={"lazy": "off"}
        )
    usage = reply.usage
    seen = {
        "cli": (cli["prompt_tokens"], cli["cached_tokens"], cli["finish_reason"]),
        "LLM stream": (stream.prompt_tokens, stream.cached_tokens, stream.last.finish_reason),
        "its response": (
            stream.last.prompt_tokens,
            stream.last.cached_tokens,
            stream.last.finish_reason,
        ),
        "server": (
            usage.prompt_tokens,
            usage.prompt_tokens_details.cached_tokens,
            reply.choices[0].finish_reason,
        ),
    }
    assert len(set(seen.values())) == 1, seen
    assert 0 < cli["cached_tokens"] < cli["prompt_tokens"] and cli["finish_reason"] == "length"


@pytest.mark.slow
def test_lazymlx_serve_logs_each_request_on_stderr(tiny_model_dir):
    """The real command: one "serving" line with the port it got, then a line per request."""
    command = [str(Path(sys.executable).parent / "lazymlx"), "serve", "-m", str(tiny_model_dir)]
    server = subprocess.Popen(
        [*command, "--port", "0"], stderr=subprocess.PIPE, text=True, env=dict(os.environ)
    )
    try:
        serving = server.stderr.readline()
        assert serving.startswith(f"serving {tiny_model_dir} at http://127.0.0.1:"), serving
        url = serving.split(" at ")[1].split(" ")[0]
        real = openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=60)
        reply = real.completions.create(model="m", prompt="the cat", max_tokens=2)
        logged = server.stderr.readline()
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)
        server.stderr.close()
    assert f" {reply.id} completions 200 · prompt " in logged and " · 2 tok out · " in logged


def test_a_fault_of_ours_is_a_500_error_object_and_the_server_lives_on(llm, server, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(llm, "submit", broken)
    code, reply = post(server[0] + "/v1/completions", b'{"prompt": "x", "max_tokens": 2}')
    assert code == 500 and reply["error"]["type"] == "server_error"
    assert "a bug" in reply["error"]["message"]
    monkeypatch.undo()
    assert post(server[0] + "/v1/completions", b'{"prompt": "x", "max_tokens": 2}')[0] == 200


def test_logprob_tokens_carry_their_own_bytes_for_each_detokenizer(tiny, tmp_path):
    """Byte-level BPE (SmolLM2), SentencePiece with byte fallback (Llama 2) and any other
    tokenizer (decoded alone): a character split over tokens has its bytes split the same way."""
    from mlx_lm.tokenizer_utils import TokenizerWrapper
    from mlx_lm.tokenizer_utils import load as load_tokenizer
    from test_gguf_tokenizer import sentencepiece_metadata

    from lazymlx.models.gguf_tokenizer import write_tokenizer
    from lazymlx.server.logprobs import TokenTexts

    write_tokenizer(sentencepiece_metadata(), tmp_path)
    bpe, spm = tiny[1], load_tokenizer(tmp_path)
    naive = TokenizerWrapper(bpe._tokenizer)  # mlx-lm's default: the naive detokenizer
    cases = [(bpe, "the €", "the €"), (spm, "the €", " the €"), (naive, "the cat", "the cat")]
    for tokenizer, prompt, expected in cases:  # SentencePiece keeps the word's leading space
        ids = tokenizer.encode(prompt, add_special_tokens=False)
        assert b"".join(TokenTexts(tokenizer).bytes(token) for token in ids) == expected.encode()
    assert len(bpe.encode("€", add_special_tokens=False)) > 1  # split, as the test needs


def test_the_byte_level_alphabet_is_gpt2s():
    """Every byte once; printable ones stand for themselves, the rest from chr(256) up in order
    (so GPT-2's space and newline are Ġ and Ċ)."""
    from lazymlx.server.logprobs import BYTE_LEVEL_ALPHABET

    assert sorted(BYTE_LEVEL_ALPHABET.values()) == list(range(256))
    assert BYTE_LEVEL_ALPHABET["a"] == ord("a") and BYTE_LEVEL_ALPHABET["ÿ"] == 255
    assert BYTE_LEVEL_ALPHABET["Ā"] == 0 and BYTE_LEVEL_ALPHABET["Ġ"] == 32
    assert BYTE_LEVEL_ALPHABET["Ċ"] == 10


def test_max_tokens_above_the_limit_is_capped_and_said(server, client):
    """Many clients ask 4096-8192 by default: capped to the server's limit (300 here) and the
    model's context, reported in usage."""
    reply = client.completions.create(model="m", prompt="once upon a time", max_tokens=100_000)
    assert reply.choices[0].text
    usage = reply.usage.model_extra
    assert usage["max_tokens_asked"] == 100_000 and usage["max_tokens"] == 300
    fine = client.completions.create(model="m", prompt="once upon a time", max_tokens=3)
    assert "max_tokens" not in fine.usage.model_extra


def test_ttft_counts_from_arrival_with_the_queue_time_beside_it(client):
    """Two clients at once: the second waits for the first; its ttft_s includes that wait."""
    results: dict[str, tuple[float, dict]] = {}

    def ask(name: str, tokens: int) -> None:
        started = time.monotonic()
        reply = client.completions.create(
            model="m", prompt=f"{name} asks about cats " * 40, max_tokens=tokens,
            extra_body={"lazy": "off"},
        )  # fmt: skip
        results[name] = (time.monotonic() - started, reply.usage.model_extra)

    first = threading.Thread(target=ask, args=("first", 200))
    first.start()
    time.sleep(0.3)
    started = time.monotonic()  # the second streams: its first token's arrival is seen
    stream = client.completions.create(
        model="m", prompt="second asks about dogs " * 40, max_tokens=3, stream=True,
        stream_options={"include_usage": True}, extra_body={"lazy": "off"},
    )  # fmt: skip
    seen, usage = None, None
    for chunk in stream:
        if seen is None and chunk.choices and chunk.choices[0].text:
            seen = time.monotonic() - started
        usage = chunk.usage.model_extra if chunk.usage else usage
    first.join(timeout=120)
    assert usage["queued_s"] > 0.05  # it waited for the first request
    assert usage["ttft_s"] >= usage["queued_s"]
    assert usage["ttft_s"] >= seen - 0.1  # what the client waited, less the network's share
    assert results["first"][1]["queued_s"] < 0.1


def _status_without_a_key(url: str, method: str = "GET") -> tuple[int, dict]:
    request = urllib.request.Request(url, method=method, data=b"{}" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_an_api_key_guards_every_endpoint_in_openais_shape(llm):
    """The real openai client with the right key, a wrong one and none: only the right one is
    answered; every endpoint (a route that does not exist too) asks for it first."""
    with running(create_app(llm, Limits(max_tokens=300), api_key="open sesame")) as url:
        right = openai.OpenAI(base_url=url + "/v1", api_key="open sesame", max_retries=0)
        reply = right.completions.create(model="m", prompt="the cat", max_tokens=2)
        assert reply.usage.completion_tokens == 2 and right.models.list().data
        for key, said in (("open sesamf", "a wrong API key"), (None, "no API key")):
            client = openai.OpenAI(base_url=url + "/v1", api_key=key or "x", max_retries=0)
            # none: the client sends no Authorization header at all
            headers = {} if key else {"Authorization": openai.Omit()}
            with pytest.raises(openai.AuthenticationError) as refused:
                client.chat.completions.create(
                    model="m", messages=CHAT, max_tokens=2, extra_headers=headers
                )
            assert refused.value.code == "invalid_api_key" and said in refused.value.message
            with pytest.raises(openai.AuthenticationError):
                client.models.list(extra_headers=headers)
        for path, method in (
            ("/health", "GET"),
            ("/v1/models", "GET"),
            ("/v1/completions", "POST"),
            ("/nowhere", "GET"),
        ):
            status, body = _status_without_a_key(url + path, method)
            assert status == 401 and set(body["error"]) == {"message", "type", "param", "code"}


def test_a_server_beyond_loopback_without_a_key_is_warned_about():
    from lazymlx.server.app import exposure_warning

    assert exposure_warning("0.0.0.0", None).startswith("listening on 0.0.0.0 with no API key")
    assert "LAZYMLX_API_KEY" in exposure_warning("192.168.1.5", None)
    assert exposure_warning("::", None) is not None
    for loopback in ("127.0.0.1", "::1", "localhost"):
        assert exposure_warning(loopback, None) is None
    assert exposure_warning("0.0.0.0", "key") is None


@pytest.mark.slow
def test_lazymlx_serve_takes_its_key_from_the_environment(tiny_model_dir):
    """`LAZYMLX_API_KEY=... lazymlx serve` on loopback: no warning, and the key is asked for."""
    command = [str(Path(sys.executable).parent / "lazymlx"), "serve", "-m", str(tiny_model_dir)]
    env = dict(os.environ, LAZYMLX_API_KEY="from-env")
    server = subprocess.Popen([*command, "--port", "0"], stderr=subprocess.PIPE, text=True, env=env)
    try:
        serving = server.stderr.readline()
        url = serving.split(" at ")[1].split(" ")[0]
        real = openai.OpenAI(base_url=url, api_key="from-env", max_retries=0, timeout=60)
        assert real.completions.create(model="m", prompt="the cat", max_tokens=2).choices
        wrong = openai.OpenAI(base_url=url, api_key="guess", max_retries=0, timeout=60)
        with pytest.raises(openai.AuthenticationError):
            wrong.models.list()
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)
        rest = server.stderr.read()
        server.stderr.close()
    assert "warning" not in serving + rest
