"""`lazymlx serve`: an OpenAI-compatible HTTP server over one LLM (FastAPI on uvicorn).

Endpoints: POST /v1/chat/completions and /v1/completions (streamed as server-sent events when
"stream": true), GET /v1/models and /health. Requests queue on the LLM's generation thread, one
at a time, none lost; a client that disconnects mid-stream cancels its request, freeing the
thread. A conversation's next request reuses the kept context of its previous one (the LLM's
context pool), and `usage` says how many prompt tokens were cached, with the TTFT. The pruning
preset is the LLM's default or the request's own "lazy" field. Bodies and max_tokens are
bounded; a bad request gets a 4xx with an OpenAI-style error object, never a crash.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lazymlx.errors import LazymlxError
from lazymlx.generation import Response
from lazymlx.llm import LLM, Stream


class _Body(BaseModel):
    """The fields both endpoints read; others (user, n=1, ...) are accepted and ignored."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=0.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=0)
    min_p: float = Field(default=0.0, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(default=None, gt=0.0)
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    lazy: str | None = None  # lazymlx: the pruning preset for this request


class ChatBody(_Body):
    messages: list[dict[str, Any]] = Field(min_length=1)


class CompletionBody(_Body):
    prompt: str | list[int]


@dataclass(frozen=True)
class Limits:
    max_tokens: int = 4096  # the most tokens one request may generate
    max_request_bytes: int = 4 << 20  # about a million tokens of text


def error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status)


def _text(content: Any) -> str:
    """A message's content: a string, or OpenAI's list of parts (the text parts, joined)."""
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


class _StopFinder:
    """Cuts the answer at the first stop string, holding back text that may begin one."""

    def __init__(self, stop: str | list[str] | None) -> None:
        self.stops = [stop] if isinstance(stop, str) else [s for s in stop or [] if s]
        self.pending = ""

    def feed(self, piece: str) -> tuple[str, bool]:
        """The text safe to send now, and whether a stop string was hit."""
        self.pending += piece
        for stop in self.stops:
            if stop in self.pending:
                return self.pending[: self.pending.index(stop)], True
        hold = max((len(s) - 1 for s in self.stops), default=0)
        cut = len(self.pending) - hold
        ready, self.pending = self.pending[:cut], self.pending[cut:]
        return ready, False

    def flush(self) -> str:
        ready, self.pending = self.pending, ""
        return ready


def create_app(llm: LLM, limits: Limits | None = None) -> FastAPI:
    """The server for `llm`; requests that name no "lazy" preset get the LLM's."""
    limits = limits or Limits()
    app = FastAPI(title="lazymlx", description="OpenAI-compatible API over lazymlx")
    created = int(time.time())

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        card = {"id": llm.name, "object": "model", "created": created, "owned_by": "lazymlx"}
        return {"object": "list", "data": [card]}

    async def parse(request: Request, schema: type[_Body]) -> _Body | JSONResponse:
        size = int(request.headers.get("content-length") or 0)
        if size > limits.max_request_bytes:
            return error(
                413, f"the request is {size} bytes; the limit is {limits.max_request_bytes}"
            )
        raw = await request.body()
        if len(raw) > limits.max_request_bytes:
            return error(413, f"the request is over {limits.max_request_bytes} bytes")
        try:
            return schema.model_validate(json.loads(raw))
        except json.JSONDecodeError as bad:
            return error(400, f"the body is not valid JSON ({bad})")
        except ValidationError as bad:
            first = bad.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "body"
            return error(400, f"{where}: {first['msg']}")

    def start(body: _Body, **prompt: Any) -> Stream | JSONResponse:
        max_tokens = body.max_completion_tokens or body.max_tokens or min(512, limits.max_tokens)
        if max_tokens > limits.max_tokens:
            return error(400, f"max_tokens is {max_tokens}; this server allows {limits.max_tokens}")
        try:
            return llm.submit(
                **prompt,
                max_tokens=max_tokens,
                lazy=body.lazy or ...,
                seed=body.seed,
                temp=body.temperature,
                top_p=body.top_p,
                top_k=body.top_k,
                min_p=body.min_p,
                repetition_penalty=body.repetition_penalty,
            )
        except LazymlxError as bad:
            return error(400, str(bad))

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await parse(request, ChatBody)
        if isinstance(body, JSONResponse):
            return body
        messages = [
            {"role": m.get("role", "user"), "content": _text(m.get("content"))}
            for m in body.messages
        ]
        stream = start(body, messages=messages)
        if isinstance(stream, JSONResponse):
            return stream
        return await respond(request, body, stream, chat=True)

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await parse(request, CompletionBody)
        if isinstance(body, JSONResponse):
            return body
        stream = start(body, prompt=body.prompt)
        if isinstance(stream, JSONResponse):
            return stream
        return await respond(request, body, stream, chat=False)

    async def respond(request: Request, body: _Body, stream: Stream, chat: bool):
        ident = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        kind = "chat.completion" if chat else "text_completion"
        if body.stream:
            events = _events(request, body, stream, ident, kind, chat)
            return StreamingResponse(events, media_type="text/event-stream")
        try:
            text, finish = await asyncio.to_thread(_collect, stream, _StopFinder(body.stop))
        except LazymlxError as bad:
            return error(400, str(bad))
        choice = {"index": 0, "finish_reason": finish}
        choice |= {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
        return {
            "id": ident,
            "object": kind,
            "created": int(time.time()),
            "model": llm.name,
            "choices": [choice],
            "usage": _usage(stream),
        }

    async def _events(request, body, stream, ident, kind, chat) -> AsyncIterator[str]:
        stop = _StopFinder(body.stop)
        responses = iter(stream)
        base = {"id": ident, "object": f"{kind}.chunk" if chat else kind, "model": llm.name}

        def event(text: str, finish: str | None, first: bool = False, **extra: Any) -> str:
            delta = {"role": "assistant", "content": text} if first else {"content": text}
            part = {"delta": delta} if chat else {"text": text}
            choice = {"index": 0, "finish_reason": finish} | part
            payload = base | {"created": int(time.time()), "choices": [choice]} | extra
            return f"data: {json.dumps(payload)}\n\n"

        try:
            if chat:
                yield event("", None, first=True)
            finish = "length"
            while True:
                response = await asyncio.to_thread(next, responses, None)
                if response is None:
                    break
                text, hit = stop.feed(response.text)
                if hit:
                    finish = "stop"
                    yield event(text, None)
                    break
                if text:
                    yield event(text, None)
                if await request.is_disconnected():
                    return
                finish = response.finish_reason or finish
            rest = stop.flush() if finish != "stop" else ""
            usage = {}
            if body.stream_options and body.stream_options.get("include_usage"):
                usage = {"usage": _usage(stream)}
            yield event(rest, finish, **usage)
            yield "data: [DONE]\n\n"
        except LazymlxError as bad:
            yield f"data: {json.dumps({'error': {'message': str(bad), 'type': 'invalid_request_error'}})}\n\n"
        finally:
            stream.cancel()  # a client gone mid-stream frees the generation thread

    return app


def _collect(stream: Stream, stop: _StopFinder) -> tuple[str, str]:
    pieces, finish = [], "length"
    responses: Iterator[Response] = iter(stream)
    for response in responses:
        text, hit = stop.feed(response.text)
        pieces.append(text)
        if hit:
            stream.cancel()
            for _ in responses:  # let the request end before answering
                pass
            return "".join(pieces), "stop"
        finish = response.finish_reason or finish
    return "".join(pieces) + stop.flush(), finish


def _usage(stream: Stream) -> dict[str, Any]:
    last = stream.last
    completion = last.generation_tokens if last else 0
    return {
        "prompt_tokens": stream.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": stream.prompt_tokens + completion,
        "prompt_tokens_details": {"cached_tokens": stream.cached_tokens},
        # lazymlx's own: seconds to the first token, and the prefill work computed
        "ttft_s": last.ttft_s if last else None,
        "prefill_fraction": last.lazy.prefill_fraction if last and last.lazy else 1.0,
    }


def serve(llm: LLM, host: str, port: int, limits: Limits) -> None:
    import uvicorn

    uvicorn.run(create_app(llm, limits), host=host, port=port, log_level="warning")
