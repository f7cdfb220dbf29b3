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
from collections.abc import AsyncIterator
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
    seed: int | None = Field(default=None, ge=0, lt=2**63)
    stop: str | list[str] | None = Field(default=None, max_length=4)
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


class _Request:
    """One request's stream as the event loop sees it: responses arrive on an asyncio queue,
    put there by the generation thread, so no thread is held per waiting request."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue = asyncio.Queue()
        self.stream: Stream | None = None
        self.last: Response | None = None

    def listener(self, item: Response | Exception | None) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, item)

    async def responses(self, request: Request) -> AsyncIterator[Response]:
        """The responses until the end; an error is raised; a client gone cancels the request
        (checked each second while waiting, and every 16 responses)."""
        count = 0
        while True:
            try:
                item = await asyncio.wait_for(self.queue.get(), timeout=1.0)
            except asyncio.TimeoutError:  # a long prefill or a queue ahead
                item = False
            count += 1
            if (item is False or count % 16 == 0) and await request.is_disconnected():
                self.stream.cancel()
                return
            if item is False:
                continue
            if item is None:
                return
            if isinstance(item, Exception):
                raise item
            self.last = item
            yield item

    def usage(self) -> dict[str, Any]:
        stream, last = self.stream, self.last
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
        raw = bytearray()
        async for part in request.stream():  # a chunked body has no length to check up front
            raw += part
            if len(raw) > limits.max_request_bytes:
                return error(413, f"the request is over the {limits.max_request_bytes}-byte limit")
        try:
            return schema.model_validate(json.loads(raw))
        except ValueError as bad:  # not JSON, not UTF-8, or (pydantic's) not the right fields
            if isinstance(bad, ValidationError):
                first = bad.errors()[0]
                where = ".".join(str(part) for part in first["loc"]) or "body"
                return error(400, f"{where}: {first['msg']}")
            return error(400, f"the body is not valid JSON ({bad})")

    async def start(body: _Body, **prompt: Any) -> _Request | JSONResponse:
        max_tokens = body.max_completion_tokens or body.max_tokens or min(512, limits.max_tokens)
        if max_tokens > limits.max_tokens:
            return error(400, f"max_tokens is {max_tokens}; this server allows {limits.max_tokens}")
        pending = _Request()
        try:  # tokenizing a large body is work: off the event loop
            pending.stream = await asyncio.to_thread(
                llm.submit,
                **prompt,
                max_tokens=max_tokens,
                lazy=body.lazy or ...,
                seed=body.seed,
                listener=pending.listener,
                temp=body.temperature,
                top_p=body.top_p,
                top_k=body.top_k,
                min_p=body.min_p,
                repetition_penalty=body.repetition_penalty,
            )
        except LazymlxError as bad:
            return error(400, str(bad))
        return pending

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await parse(request, ChatBody)
        if isinstance(body, JSONResponse):
            return body
        messages = [
            {"role": m.get("role", "user"), "content": _text(m.get("content"))}
            for m in body.messages
        ]
        pending = await start(body, messages=messages)
        if isinstance(pending, JSONResponse):
            return pending
        return await respond(request, body, pending, chat=True)

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await parse(request, CompletionBody)
        if isinstance(body, JSONResponse):
            return body
        pending = await start(body, prompt=body.prompt)
        if isinstance(pending, JSONResponse):
            return pending
        return await respond(request, body, pending, chat=False)

    async def respond(request: Request, body: _Body, pending: _Request, chat: bool):
        ident = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        kind = "chat.completion" if chat else "text_completion"
        if body.stream:
            events = _events(request, body, pending, ident, kind, chat)
            return StreamingResponse(events, media_type="text/event-stream")
        stop, pieces, finish = _StopFinder(body.stop), [], "length"
        try:
            async for response in pending.responses(request):
                text, hit = stop.feed(response.text)
                pieces.append(text)
                if hit:
                    finish = "stop"
                    pending.stream.cancel()
                    break
                finish = response.finish_reason or finish
        except LazymlxError as bad:
            return error(400, str(bad))
        except Exception as bad:  # a fault of ours: an error object, and the server lives on
            return error(500, f"generation failed: {bad}", "server_error")
        text = "".join(pieces) + (stop.flush() if finish != "stop" else "")
        choice = {"index": 0, "finish_reason": finish}
        choice |= {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
        return {
            "id": ident,
            "object": kind,
            "created": int(time.time()),
            "model": llm.name,
            "choices": [choice],
            "usage": pending.usage(),
        }

    async def _events(request, body, pending, ident, kind, chat) -> AsyncIterator[str]:
        stop = _StopFinder(body.stop)
        base = {"id": ident, "object": f"{kind}.chunk" if chat else kind, "model": llm.name}

        def event(choices: list[dict], **extra: Any) -> str:
            payload = base | {"created": int(time.time()), "choices": choices} | extra
            return f"data: {json.dumps(payload)}\n\n"

        def choice(text: str, finish: str | None, first: bool = False) -> dict:
            delta = {"role": "assistant", "content": text} if first else {"content": text}
            part = {"delta": delta} if chat else {"text": text}
            return {"index": 0, "finish_reason": finish} | part

        try:
            if chat:
                yield event([choice("", None, first=True)])
            finish = "length"
            async for response in pending.responses(request):
                text, hit = stop.feed(response.text)
                if text:
                    yield event([choice(text, None)])
                if hit:
                    finish = "stop"
                    break
                finish = response.finish_reason or finish
            yield event([choice(stop.flush() if finish != "stop" else "", finish)])
            if body.stream_options and body.stream_options.get("include_usage"):
                yield event([], usage=pending.usage())  # OpenAI's own last chunk: no choices
            yield "data: [DONE]\n\n"
        except Exception as bad:  # mid-stream the status is sent: an error event instead
            kind = "invalid_request_error" if isinstance(bad, LazymlxError) else "server_error"
            yield f"data: {json.dumps({'error': {'message': str(bad), 'type': kind}})}\n\n"
        finally:
            pending.stream.cancel()  # a client gone mid-stream frees the generation thread

    return app


def serve(llm: LLM, host: str, port: int, limits: Limits) -> None:
    import uvicorn

    uvicorn.run(create_app(llm, limits), host=host, port=port, log_level="warning")
