"""`lazymlx serve` over loopback, driven by the real `openai` client (and raw HTTP for bad input)."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import openai
import pytest
import uvicorn

from lazymlx import LazyConfig
from lazymlx.llm import LLM
from lazymlx.server import Limits, create_app

PRUNING = LazyConfig(schedule=((0.25, 0.5), (0.5, 0.5)), decode="revive")
CHAT = [{"role": "user", "content": "the cat sat on the mat"}]


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    llm = LLM(str(tiny_model_dir), lazy=PRUNING)
    requests = []  # every stream the server starts, to check what happened to it
    submit = llm.submit
    llm.submit = lambda *a, **k: requests.append(submit(*a, **k)) or requests[-1]
    app = create_app(llm, Limits(max_tokens=300, max_request_bytes=20_000))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}", requests
    server.should_exit = True
    thread.join(timeout=10)


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


def test_completions_take_the_lazy_preset_per_request(client):
    stock = client.completions.create(
        model="m", prompt="once upon a time", max_tokens=6, extra_body={"lazy": "off"}
    )
    assert stock.usage.model_extra["prefill_fraction"] == 1.0
    assert stock.choices[0].text
    with pytest.raises(openai.BadRequestError, match="unknown lazy preset 'fast'"):
        client.completions.create(model="m", prompt="x", max_tokens=2, extra_body={"lazy": "fast"})


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
    assert gone._items.qsize() < 300  # stopped early (its unread responses), not at max_tokens
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
            b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 100000}',
            400,
            "allows 300",
        ),
        (
            json.dumps({"messages": [{"role": "user", "content": "x" * 30_000}]}).encode(),
            413,
            "limit",
        ),
        (b'{"messages": [{"role": "user", "content": "bad \\udcff"}]}', 400, "UTF-8"),
        (b'{"messages": [{"role": "user", "content": "hi"}], "seed": -1}', 400, "seed"),
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
    ok, _ = post(server[0] + "/v1/completions", b'{"prompt": "still up", "max_tokens": 2}')
    assert ok == 200


def test_stop_strings_cut_at_the_earliest_and_empty_ones_are_ignored():
    from lazymlx.server import _StopFinder

    finder = _StopFinder(["zz", "b"])
    assert finder.feed("a") == ("", False)  # held back: it may begin "zz"
    assert finder.feed("bzz") == ("a", True)
    assert _StopFinder("").feed("abc") == ("abc", False)


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
