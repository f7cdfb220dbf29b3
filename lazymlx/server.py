"""`lazymlx serve`: an OpenAI-compatible HTTP server over one LLM (FastAPI on uvicorn).

Endpoints: POST /v1/chat/completions and /v1/completions (streamed as server-sent events when
"stream": true), GET /v1/models, /v1/models/{id} and /health. Requests queue on the LLM's
generation thread, one at a time, none lost; a client that disconnects mid-stream cancels its
request, freeing the thread. A conversation's next request reuses the kept context of its
previous one (the LLM's context pool), and `usage` says how many prompt tokens were cached, with
the TTFT. The pruning preset is the LLM's default or the request's own "lazy" field.

With an API key (`--api-key`, LAZYMLX_API_KEY) every endpoint asks for it, as OpenAI's does.
Every OpenAI request field is either done (sampling, penalties, logit bias, logprobs, stop, ...)
or refused with a 400 naming it; a field's no-op value (n=1, tools=[]) is accepted. Every error
reply is OpenAI's error object. Each request gets one log line when it ends; while a request
waits (a long prefill, a queue ahead) its prefill progress is logged and an open stream gets an
SSE keep-alive comment, as mlx-lm's server does, so clients with read timeouts stay.
"""

from __future__ import annotations

import asyncio
import errno
import hmac
import ipaddress
import json
import logging
import socket
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from mlx_lm.tokenizer_utils import (
    BPEStreamingDetokenizer,
    SPMStreamingDetokenizer,
    TokenizerWrapper,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException

from lazymlx.errors import LazymlxError
from lazymlx.generation import Response
from lazymlx.llm import LLM, Stream
from lazymlx.sampling import LIMITS, check_sampling

log = logging.getLogger("lazymlx.server")


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: bool = False
    include_obfuscation: bool = True  # accepted; no obfuscation padding is added


class _Body(BaseModel):
    """The fields both endpoints honour; other fields are checked against FIELDS_NOT_DONE."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None  # any name: the one loaded model answers, and the reply names it
    # the values' limits are the one request check's (lazymlx/sampling.py, LIMITED_FIELDS)
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[int, float] | None = None
    seed: int | None = None
    stop: str | list[str] | None = Field(default=None, max_length=4)
    stream: bool = False
    stream_options: StreamOptions | None = None
    lazy: str | None = None  # lazymlx: the pruning preset for this request


class ChatBody(_Body):
    messages: list[dict[str, Any]] = Field(min_length=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)


class CompletionBody(_Body):
    prompt: str | list[int] | list[str] | list[list[int]]
    logprobs: int | None = Field(default=None, ge=0, le=5)


# OpenAI fields this server does not do, with the values that ask for nothing (null always
# does): any other value is a 400 naming the field, never a 200 that ignores it
_NO_TOOLS = "does not call tools or functions; leave {} out"
_TEXT_ONLY = "writes text only; leave {} out"
FIELDS_NOT_DONE: dict[str, tuple[list[Any], str]] = {
    "n": ([1], "returns one choice per request; send n=1, or one request per choice"),
    "tools": ([[]], _NO_TOOLS),
    "tool_choice": (["none"], _NO_TOOLS),
    "functions": ([[]], _NO_TOOLS),
    "function_call": (["none"], _NO_TOOLS),
    "response_format": ([{"type": "text"}], _TEXT_ONLY),
    "audio": ([], _TEXT_ONLY),
    "modalities": ([["text"]], _TEXT_ONLY),
    "prediction": ([], "takes no predicted output; leave {} out"),
    "web_search_options": ([], "does not search the web; leave {} out"),
    "reasoning_effort": ([], "has no reasoning setting; leave {} out"),
    "verbosity": ([], "has no verbosity setting; leave {} out"),
    "store": ([False], "stores nothing; leave {} out"),
    "best_of": ([1], "returns one completion per request; leave {} out"),
    "echo": ([False], "does not echo the prompt; leave {} out"),
    "suffix": ([""], "does not insert text before a suffix; leave {} out"),
}
COMPLETIONS_ONLY = {"best_of", "echo", "suffix"}
# the fields checked by the one request check (lazymlx/sampling.py), as its names for them
LIMITED_FIELDS = {
    "max_tokens": "max_tokens",
    "max_completion_tokens": "max_tokens",
    "temperature": "temp",
    **{name: name for name in ("top_p", "top_k", "min_p", "repetition_penalty")},
    **{name: name for name in ("presence_penalty", "frequency_penalty", "logit_bias", "seed")},
}
CHAT_ONLY = set(FIELDS_NOT_DONE) - COMPLETIONS_ONLY - {"n"}
# labels and hints that change no answer, accepted as OpenAI accepts them (parallel_tool_calls:
# there are no tools to call)
FIELDS_IGNORED = {"user"}
CHAT_FIELDS_IGNORED = FIELDS_IGNORED | {
    "metadata",
    "safety_identifier",
    "prompt_cache_key",
    "service_tier",
    "parallel_tool_calls",
}


@dataclass(frozen=True)
class Limits:
    max_tokens: int = 4096  # the most tokens one request may generate
    max_request_bytes: int = 4 << 20  # about a million tokens of text
    keepalive_s: float = 5.0  # the longest a waiting request goes without a keep-alive


class Refusal(Exception):
    """A request the server answers with an OpenAI error object (and one log line)."""

    def __init__(
        self, status: int, message: str, param: str | None = None, code: str | None = None
    ):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


def error(
    status: int,
    message: str,
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """OpenAI's error object: invalid_request_error for the client's mistakes, else server_error."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return JSONResponse(body, status, headers=headers)


def _check_fields(body: _Body, chat: bool) -> None:
    """Refuse fields this endpoint does not know or does not do (see FIELDS_NOT_DONE)."""
    others = COMPLETIONS_ONLY if chat else CHAT_ONLY
    ignored = CHAT_FIELDS_IGNORED if chat else FIELDS_IGNORED
    for name, value in (body.model_extra or {}).items():
        if name in FIELDS_NOT_DONE and name not in others:
            accepted, why = FIELDS_NOT_DONE[name]
            if value is not None and value not in accepted:
                raise Refusal(400, f"{name}: this server {why.format(name)}", name)
        elif name not in ignored:
            raise Refusal(400, f"unknown field {name!r}; remove it", name)
    if chat and body.top_logprobs and not body.logprobs:
        raise Refusal(400, "top_logprobs needs logprobs: true", "top_logprobs")


def _check_values(body: _Body) -> None:
    """Refuse a sampling value, max_tokens or seed outside the one request check's limits
    (lazymlx/sampling.py: the CLI's, the chat's and `LLM`'s too), naming the field."""
    for field, name in LIMITED_FIELDS.items():
        try:
            check_sampling({name: getattr(body, field)}, spell=lambda _, field=field: field)
        except LazymlxError as bad:
            raise Refusal(400, str(bad), field) from None


def _messages(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The chat as the template takes it: each content a string (OpenAI's text parts joined)."""
    rendered = []
    for i, message in enumerate(messages):
        content = message.get("content")
        if isinstance(content, list):
            for j, part in enumerate(content):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                if kind != "text":
                    raise Refusal(
                        400,
                        f"messages[{i}].content[{j}] is {'an' if str(kind)[:1] in 'aeiou' else 'a'} "
                        f"{kind!r} part; this server reads text parts only",
                        "messages",
                    )
            content = "".join(part.get("text", "") for part in content)
        text = "" if content is None else str(content)
        rendered.append({"role": message.get("role", "user"), "content": text})
    return rendered


def _prompt(prompt: str | list[int] | list[str] | list[list[int]]) -> str | list[int]:
    """One prompt: text or token ids; a batch of several gets a 400 (one request each)."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str | list):
        if len(prompt) > 1:
            raise Refusal(
                400, "prompt: this server takes one prompt per request; send one each", "prompt"
            )
        return prompt[0]
    return prompt


class _StopFinder:
    """Cuts the answer where the first stop string starts, holding back text that may begin one."""

    def __init__(self, stop: str | list[str] | None) -> None:
        self.stops = [s for s in ([stop] if isinstance(stop, str) else stop or []) if s]
        self.pending = ""

    def feed(self, piece: str) -> tuple[str, bool]:
        """The text safe to send now, and whether a stop string was hit."""
        self.pending += piece
        hits = [self.pending.index(stop) for stop in self.stops if stop in self.pending]
        if hits:
            return self.pending[: min(hits)], True
        hold = max((len(s) - 1 for s in self.stops), default=0)
        cut = len(self.pending) - hold
        ready, self.pending = self.pending[:cut], self.pending[cut:]
        return ready, False

    def flush(self) -> str:
        ready, self.pending = self.pending, ""
        return ready


def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet read back: each symbol to the byte it stands for. The
    printable bytes stand for themselves; the others were moved up to chr(256 + n), in order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    moved = [byte for byte in range(256) if byte not in printable]
    return {chr(byte): byte for byte in printable} | {
        chr(256 + n): byte for n, byte in enumerate(moved)
    }


BYTE_LEVEL_ALPHABET = _byte_level_alphabet()


class _Tokens:
    """A token's text and bytes for logprobs (a byte-level token may hold part of a character,
    whose bytes OpenAI's `bytes` field carries)."""

    def __init__(self, tokenizer: TokenizerWrapper) -> None:
        self.tokenizer = tokenizer
        self.detokenizer = tokenizer.detokenizer  # which scheme maps ids to bytes

    def text(self, token: int) -> str:
        return self.bytes(token).decode(errors="replace")

    def bytes(self, token: int) -> bytes:
        if isinstance(self.detokenizer, BPEStreamingDetokenizer):
            symbols, table = self.tokenizer.convert_ids_to_tokens(token), BYTE_LEVEL_ALPHABET
            return b"".join(bytes([table[c]]) if c in table else c.encode() for c in symbols or "")
        if isinstance(self.detokenizer, SPMStreamingDetokenizer):
            return self.detokenizer.tokenmap[token].replace("\u2581".encode(), b" ")
        return self.tokenizer.decode([token]).encode()

    def entry(self, token: int, logprob: float) -> dict[str, Any]:
        """Chat's shape: token text, logprob and bytes."""
        raw = self.bytes(token)
        return {"token": raw.decode(errors="replace"), "logprob": logprob, "bytes": list(raw)}

    def chat(self, responses: list[Response]) -> dict[str, Any]:
        """Chat's `logprobs`: one entry per token with its `top_logprobs`."""
        content = [
            self.entry(r.token, r.token_logprob)
            | {"top_logprobs": [self.entry(t, lp) for t, lp in r.top_logprobs]}
            for r in responses
        ]
        return {"content": content, "refusal": None}

    def completion(self, responses: list[Response], offset: int) -> dict[str, Any]:
        """The completions' `logprobs`: columns, text offsets counted from `offset`, and each
        token's alternatives with the sampled one among them, as OpenAI gives them."""
        tokens, offsets, tops = [], [], []
        for r in responses:
            text = self.text(r.token)
            tokens.append(text)
            offsets.append(offset)
            offset += len(text)
            alternatives = {self.text(t): logprob for t, logprob in r.top_logprobs}
            tops.append(alternatives | {text: r.token_logprob})
        return {
            "tokens": tokens,
            "token_logprobs": [r.token_logprob for r in responses],
            "top_logprobs": tops,
            "text_offset": offsets,
        }


_WAITING = object()


class _Request:
    """One request's stream as the event loop sees it: responses arrive on an asyncio queue,
    put there by the generation thread, so no thread is held per waiting request."""

    def __init__(self, ident: str, endpoint: str, keepalive_s: float) -> None:
        self.ident, self.endpoint, self.keepalive_s = ident, endpoint, keepalive_s
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue = asyncio.Queue()
        self.stream: Stream | None = None
        self.last: Response | None = None
        self.started = time.perf_counter()  # its arrival: ttft_s and queued_s count from it
        self.progress: tuple[int, int] | None = None  # prefill (done, total), from the thread
        self.max_tokens_asked = 0

    def listener(self, item: Response | Exception | None) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, item)

    def on_progress(self, done: int, total: int) -> None:
        self.progress = (done, total)

    async def responses(self, request: Request) -> AsyncIterator[Response | None]:
        """The responses until the end, and None each `keepalive_s` that passes without one (a
        long prefill, a queue ahead), after logging the prefill's progress: a stream sends a
        keep-alive then. An error is raised; a client gone cancels the request (checked while
        waiting, and every 16 responses)."""
        count, quiet_since = 0, time.monotonic()
        while True:
            try:
                wait = min(1.0, self.keepalive_s)
                item = await asyncio.wait_for(self.queue.get(), timeout=wait)
            except asyncio.TimeoutError:
                item = _WAITING
            count += 1
            if (item is _WAITING or count % 16 == 0) and await request.is_disconnected():
                self.stream.cancel()
                return
            if item is _WAITING:
                if time.monotonic() - quiet_since >= self.keepalive_s:
                    quiet_since = time.monotonic()
                    self.log_waiting()
                    yield None
                continue
            if item is None:
                return
            if isinstance(item, Exception):
                raise item
            self.last, quiet_since = item, time.monotonic()
            yield item

    def waiting(self) -> str:
        """What the request waits for, for the log and keep-alive comments. Before the prefill's
        first report past 0 it gives the prompt's size alone: stock mlx-lm (`lazy: "off"`)
        reports per 2,048-token chunk, so a shorter prompt's whole step would read `0/N`, as if
        stuck."""
        if self.progress is None:
            return "queued"
        if self.last is not None:
            return "decoding"
        done, total = self.progress
        return f"prefill {done}/{total} tokens" if done else f"prefill of {total} tokens"

    def log_waiting(self) -> None:
        elapsed = time.perf_counter() - self.started
        log.info("%s %s, %.0f s", self.ident, self.waiting(), elapsed)

    def usage(self) -> dict[str, Any]:
        """OpenAI's usage, and lazymlx's own: ttft_s from the request's arrival (queued_s of it
        spent waiting for the requests ahead), the share of stock's (token, layer) work the
        conversation's context has cost so far and the pruned tokens this request brought back
        (when pruning changed anything), and max_tokens when it was capped."""
        stream, last = self.stream, self.last
        completion = last.generation_tokens if last else 0
        usage = {
            "prompt_tokens": stream.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": stream.prompt_tokens + completion,
            "prompt_tokens_details": {"cached_tokens": stream.cached_tokens},
        }
        if last is not None:  # the LLM counted them from this request's arrival
            usage["queued_s"], usage["ttft_s"] = last.queued_s, last.ttft_s
        else:  # no token yet: how long it waited, if the generation thread took it up
            waited = None if stream.started is None else stream.started - self.started
            usage["queued_s"], usage["ttft_s"] = waited, None
        if last and last.lazy and last.lazy.pruned:
            usage["work_share"] = last.lazy.work_share
            usage["revived_tokens"] = last.lazy.revived_tokens
        if stream.max_tokens < self.max_tokens_asked:
            usage["max_tokens"] = stream.max_tokens
            usage["max_tokens_asked"] = self.max_tokens_asked
        return usage

    def log_end(self, status: int, finish: str) -> None:
        """The request's one log line: what it cost and how it ended."""
        usage, elapsed = self.usage(), time.perf_counter() - self.started
        ttft = f"{usage['ttft_s']:.2f} s" if usage["ttft_s"] is not None else "-"
        queued = usage["queued_s"] or 0.0
        parts = [
            f"{self.ident} {self.endpoint} {status}",
            f"prompt {usage['prompt_tokens']} tok, "
            f"{usage['prompt_tokens_details']['cached_tokens']} cached",
            f"TTFT {ttft}" + (f" ({queued:.2f} s queued)" if queued >= 0.01 else ""),
        ]
        if self.last and self.last.lazy:  # the engine ran: what it saved, or that it saved nothing
            parts.append(self.last.lazy.said())
        parts.append(f"{usage['completion_tokens']} tok out")
        if "max_tokens" in usage:
            parts.append(f"max_tokens {usage['max_tokens_asked']} capped to {usage['max_tokens']}")
        parts += [finish, f"{elapsed:.2f} s"]
        log.info("%s", " · ".join(parts))


def create_app(llm: LLM, limits: Limits | None = None, api_key: str | None = None) -> FastAPI:
    """The server for `llm`; requests that name no "lazy" preset get the LLM's. With `api_key`
    every endpoint asks for it (`Authorization: Bearer KEY`, as OpenAI's clients send it)."""
    routes = _Routes(llm, limits or Limits())
    app = FastAPI(title="lazymlx", description="OpenAI-compatible API over lazymlx")
    app.add_exception_handler(Refusal, _refused)
    app.add_exception_handler(HTTPException, _not_routed)
    app.add_exception_handler(Exception, _failed)
    if api_key is not None:
        app.middleware("http")(_key_check(api_key))

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [routes.card()]}

    @app.get("/v1/models/{model_id:path}")
    def model(model_id: str) -> dict[str, Any]:
        return routes.model(model_id)

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        return await routes.chat(request)

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await routes.completions(request)

    return app


def _key_check(api_key: str):
    """The middleware that answers 401 in OpenAI's shape (`invalid_api_key`, as OpenAI's own
    API does, so clients raise AuthenticationError) to a request without the key. The key is
    compared in constant time (hmac.compare_digest), so the reply's timing says nothing of how
    much of a guess was right."""
    expected = api_key.encode()

    async def check(request: Request, call_next):
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), expected):
            return await call_next(request)
        said = "no API key" if not given else "a wrong API key"
        message = (
            f"{said}: this server asks for its key as `Authorization: Bearer KEY` "
            "(the openai client's api_key)"
        )
        log.info("%s %s 401 · %s", request.method, request.url.path, said)
        return error(401, message, code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})

    return check


def exposure_warning(address: str, api_key: str | None) -> str | None:
    """The warning a server listening beyond this machine with no key gets at start (None: it
    listens on loopback only, or asks for a key)."""
    if api_key is not None:
        return None
    try:
        loopback = ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        loopback = address == "localhost"
    if loopback:
        return None
    return (
        f"listening on {address} with no API key: anyone who can reach this port can use the "
        "model; set one with --api-key KEY or LAZYMLX_API_KEY"
    )


async def _refused(request: Request, refusal: Refusal) -> JSONResponse:
    log.info("%s %s %d · %s", request.method, request.url.path, refusal.status, refusal)
    return error(refusal.status, refusal.message, refusal.param, refusal.code)


async def _not_routed(request: Request, problem: HTTPException) -> JSONResponse:
    """404 and 405 (and any other HTTP error of the framework) in OpenAI's shape."""
    where = f"{request.method} {request.url.path}"
    if problem.status_code == 404:
        message = (
            f"no such endpoint: {where}; this server has /v1/chat/completions, "
            "/v1/completions, /v1/models and /health"
        )
    elif problem.status_code == 405:
        allowed = (problem.headers or {}).get("Allow", "another method")
        message = f"{where} is not allowed; use {allowed}"
    else:
        message = f"{where}: {problem.detail}"
    log.info("%s %d · %s", where, problem.status_code, message)
    return error(problem.status_code, message, headers=problem.headers)


async def _failed(request: Request, fault: Exception) -> JSONResponse:
    """A fault of ours: an error object, and the server lives on."""
    log.error("%s %s 500 · %r", request.method, request.url.path, fault)
    return error(500, f"the server failed: {fault}")


async def _body_bytes(request: Request, limit: int) -> bytearray:
    """The request's body, refused (413) past `limit` bytes, by its length or as it streams in
    (a chunked body has no length to check up front)."""
    size = int(request.headers.get("content-length") or 0)
    if size > limit:
        raise Refusal(413, f"the request is {size} bytes; the limit is {limit}")
    raw = bytearray()
    async for part in request.stream():
        raw += part
        if len(raw) > limit:
            raise Refusal(413, f"the request is over the {limit}-byte limit")
    return raw


def _parsed(raw: bytes, schema: type[_Body], chat: bool) -> _Body:
    """The body as the endpoint's schema, refused (400) naming the first field that is wrong."""
    try:
        body = schema.model_validate(json.loads(raw))
    except ValidationError as bad:
        first = bad.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        limited = LIMITED_FIELDS.get(where)
        if limited in LIMITS:  # a number of the wrong type: the CLI's words for its limits
            message = f"{where} takes {LIMITS[limited].takes}; got {first['input']!r}"
            raise Refusal(400, message, where) from None
        why = "unknown field; remove it" if first["type"] == "extra_forbidden" else first["msg"]
        raise Refusal(400, f"{where}: {why}", where) from None
    except ValueError as bad:  # not JSON, or not UTF-8
        raise Refusal(400, f"the body is not valid JSON ({bad})") from None
    _check_fields(body, chat)
    _check_values(body)
    return body


def _sampling(body: _Body) -> dict[str, Any]:
    """The request's sampling, penalties and logit bias, as `LLM.submit` takes them."""
    return {
        "temp": body.temperature,
        "top_p": body.top_p,
        "top_k": body.top_k,
        "min_p": body.min_p,
        "repetition_penalty": body.repetition_penalty,
        "presence_penalty": body.presence_penalty,
        "frequency_penalty": body.frequency_penalty,
        "logit_bias": body.logit_bias,
    }


class _Routes:
    """What the model endpoints do over one LLM; create_app routes each to one method."""

    def __init__(self, llm: LLM, limits: Limits) -> None:
        self.llm, self.limits = llm, limits
        self.created = int(time.time())
        self.tokens = _Tokens(llm.tokenizer)

    def card(self) -> dict[str, Any]:
        return {
            "id": self.llm.name,
            "object": "model",
            "created": self.created,
            "owned_by": "lazymlx",
        }

    def model(self, model_id: str) -> dict[str, Any]:
        if model_id != self.llm.name:
            raise Refusal(
                404,
                f"the model {model_id!r} is not served here; this server serves {self.llm.name!r}",
                "model",
                "model_not_found",
            )
        return self.card()

    async def chat(self, request: Request):
        body = await self.parse(request, ChatBody, chat=True)
        pending = _Request(f"chatcmpl-{uuid.uuid4().hex[:24]}", "chat", self.limits.keepalive_s)
        top = (body.top_logprobs or 0) if body.logprobs else None
        await self.start(body, pending, top, messages=_messages(body.messages))
        return await self.respond(request, body, pending, top, chat=True)

    async def completions(self, request: Request):
        body = await self.parse(request, CompletionBody, chat=False)
        pending = _Request(f"cmpl-{uuid.uuid4().hex[:24]}", "completions", self.limits.keepalive_s)
        await self.start(body, pending, body.logprobs, prompt=_prompt(body.prompt))
        return await self.respond(request, body, pending, body.logprobs, chat=False)

    async def parse(self, request: Request, schema: type[_Body], chat: bool) -> _Body:
        return _parsed(await _body_bytes(request, self.limits.max_request_bytes), schema, chat)

    async def start(self, body: _Body, pending: _Request, top: int | None, **prompt: Any) -> None:
        """Queue the request; max_tokens above the server's limit or the model's context (many
        clients ask 4096-8192 by default) is capped, and usage and the log say so."""
        limit = self.limits.max_tokens
        asked = body.max_completion_tokens or body.max_tokens or min(512, limit)
        pending.max_tokens_asked = asked
        try:  # tokenizing a large body is work: off the event loop
            pending.stream = await asyncio.to_thread(
                self.llm.submit,
                **prompt,
                max_tokens=min(asked, limit),
                fit_context=True,
                arrived=pending.started,
                lazy=body.lazy or ...,
                seed=body.seed,
                logprobs=top,
                on_progress=pending.on_progress,
                listener=pending.listener,
                **_sampling(body),
            )
        except LazymlxError as bad:
            raise Refusal(400, str(bad)) from None

    def logprobs(self, chat: bool, responses: list[Response], offset: int) -> dict[str, Any]:
        if chat:
            return self.tokens.chat(responses)
        return self.tokens.completion(responses, offset)

    async def respond(
        self, request: Request, body: _Body, pending: _Request, top: int | None, chat: bool
    ):
        """The answer: streamed as server-sent events, or whole as one object."""
        if body.stream:
            events = self.events(request, body, pending, top, chat)
            return StreamingResponse(events, media_type="text/event-stream")
        text, finish, kept = await self.whole_answer(request, body, pending)
        choice = {"index": 0, "finish_reason": finish, "logprobs": None}
        choice |= {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
        if top is not None:
            choice["logprobs"] = self.logprobs(chat, kept, 0)
        pending.log_end(200, finish)
        return {
            "id": pending.ident,
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": self.llm.name,
            "choices": [choice],
            "usage": pending.usage(),
        }

    async def whole_answer(
        self, request: Request, body: _Body, pending: _Request
    ) -> tuple[str, str, list[Response]]:
        """The answer's text up to a stop string, its finish reason and its responses."""
        stop, pieces, finish, kept = _StopFinder(body.stop), [], "cancelled", []
        try:
            async for response in pending.responses(request):
                if response is None:
                    continue
                kept.append(response)
                text, hit = stop.feed(response.text)
                pieces.append(text)
                if hit:
                    finish = "stop"
                    pending.stream.cancel()
                    break
                finish = response.finish_reason or finish
        except LazymlxError as bad:
            raise Refusal(400, str(bad)) from None
        finally:
            pending.stream.cancel()  # a client gone frees the generation thread
        return "".join(pieces) + (stop.flush() if finish != "stop" else ""), finish, kept

    async def events(self, request, body, pending, top, chat) -> AsyncIterator[str]:
        """The answer as server-sent events: chunks as the text comes (a keep-alive comment while
        it waits), the finish, usage if asked for, then [DONE]; an error mid-stream is an error
        event, the status having been sent."""
        stop, finish = _StopFinder(body.stop), "cancelled"
        chunks = _Chunks(self, pending, top, chat)
        try:
            if chat:
                yield chunks.event([chunks.choice("", None, [], first=True)])
            async for response in pending.responses(request):
                if response is None:
                    yield f": keepalive {pending.waiting()}\n\n"
                    continue
                text, hit = stop.feed(response.text)
                if text or top is not None:
                    yield chunks.event([chunks.choice(text, None, [response])])
                    chunks.sent += len(text)
                if hit:
                    finish = "stop"
                    break
                finish = response.finish_reason or finish
            yield chunks.event(
                [chunks.choice(stop.flush() if finish != "stop" else "", finish, [])]
            )
            if body.stream_options and body.stream_options.include_usage:
                yield chunks.event([], usage=pending.usage())  # OpenAI's own last chunk: no choices
            yield "data: [DONE]\n\n"
        except Exception as bad:  # mid-stream the status is sent: an error event instead
            kind = "invalid_request_error" if isinstance(bad, LazymlxError) else "server_error"
            finish = "error"
            yield f"data: {json.dumps({'error': {'message': str(bad), 'type': kind}})}\n\n"
        finally:
            pending.stream.cancel()  # a client gone mid-stream frees the generation thread
            pending.log_end(200, finish)


class _Chunks:
    """A streamed answer's events: each a chunk of the request's, its text counted in `sent`
    (the completions' logprobs count text offsets from it)."""

    def __init__(self, routes: _Routes, pending: _Request, top: int | None, chat: bool) -> None:
        self.routes, self.top, self.chat, self.sent = routes, top, chat, 0
        self.base = {
            "id": pending.ident,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "model": routes.llm.name,
        }

    def event(self, choices: list[dict], **extra: Any) -> str:
        payload = self.base | {"created": int(time.time()), "choices": choices} | extra
        return f"data: {json.dumps(payload)}\n\n"

    def choice(self, text: str, finish: str | None, kept: list[Response], first=False) -> dict:
        delta = {"role": "assistant", "content": text} if first else {"content": text}
        part = {"delta": delta} if self.chat else {"text": text}
        probs = None
        if self.top is not None and kept:
            probs = self.routes.logprobs(self.chat, kept, self.sent)
        return {"index": 0, "finish_reason": finish, "logprobs": probs} | part


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on host:port, made before the model loads: a busy port is one clear
    error before anything says "serving", and connections made before uvicorn starts wait."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as bad:
        raise LazymlxError(
            f"cannot listen on {host!r} ({bad.strerror}); give an address such as 127.0.0.1"
        ) from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
    try:
        sock.bind(address)
    except OSError as bad:
        sock.close()
        if bad.errno == errno.EADDRINUSE:
            raise LazymlxError(
                f"port {port} on {host} is in use (another server?); pick another with --port"
            ) from None
        raise LazymlxError(
            f"cannot listen on {host}:{port} ({bad.strerror}); pick another --host or --port"
        ) from None
    sock.listen()
    return sock


def serve(llm: LLM, sock: socket.socket, limits: Limits, api_key: str | None = None) -> None:
    """Serve on a socket from `listen`, logging each request (and waits) to stderr; with
    `api_key`, to clients that send it only."""
    import uvicorn

    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%Y-%m-%d %H:%M:%S"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    config = uvicorn.Config(create_app(llm, limits, api_key), log_level="warning")
    uvicorn.Server(config).run(sockets=[sock])
