"""What the model endpoints do over one LLM: a chat or completions request queued, then
answered whole or streamed as server-sent events, cut at its stop strings."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.responses import StreamingResponse

from lazymlx.errors import LazymlxError
from lazymlx.generation import Response
from lazymlx.llm import LLM
from lazymlx.server.bodies import (
    Body,
    ChatBody,
    CompletionBody,
    Refusal,
    chat_messages,
    one_prompt,
    parse_body,
    read_body,
    sampling_options,
)
from lazymlx.server.logprobs import TokenTexts
from lazymlx.server.pending import PendingRequest


@dataclass(frozen=True)
class Limits:
    """What the server allows one request (`lazymlx serve`'s flags)."""

    max_tokens: int = 4096  # the most tokens one request may generate
    max_request_bytes: int = 4 << 20  # about a million tokens of text
    keepalive_s: float = 5.0  # the longest a waiting request goes without a keep-alive


class StopFinder:
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


class Endpoints:
    """What the model endpoints do over one LLM; create_app routes each to one method."""

    def __init__(self, llm: LLM, limits: Limits) -> None:
        self.llm, self.limits = llm, limits
        self.created = int(time.time())
        self.tokens = TokenTexts(llm.tokenizer)

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
        pending = PendingRequest(
            f"chatcmpl-{uuid.uuid4().hex[:24]}", "chat", self.limits.keepalive_s
        )
        top = (body.top_logprobs or 0) if body.logprobs else None
        await self.start(body, pending, top, messages=chat_messages(body.messages))
        return await self.respond(request, body, pending, top, chat=True)

    async def completions(self, request: Request):
        body = await self.parse(request, CompletionBody, chat=False)
        pending = PendingRequest(
            f"cmpl-{uuid.uuid4().hex[:24]}", "completions", self.limits.keepalive_s
        )
        await self.start(body, pending, body.logprobs, prompt=one_prompt(body.prompt))
        return await self.respond(request, body, pending, body.logprobs, chat=False)

    async def parse(self, request: Request, schema: type[Body], chat: bool) -> Body:
        return parse_body(await read_body(request, self.limits.max_request_bytes), schema, chat)

    async def start(
        self, body: Body, pending: PendingRequest, top: int | None, **prompt: Any
    ) -> None:
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
                **sampling_options(body),
            )
        except LazymlxError as bad:
            raise Refusal(400, str(bad)) from None

    def logprobs(self, chat: bool, responses: list[Response], offset: int) -> dict[str, Any]:
        if chat:
            return self.tokens.chat(responses)
        return self.tokens.completion(responses, offset)

    async def respond(
        self, request: Request, body: Body, pending: PendingRequest, top: int | None, chat: bool
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
        self, request: Request, body: Body, pending: PendingRequest
    ) -> tuple[str, str, list[Response]]:
        """The answer's text up to a stop string, its finish reason and its responses."""
        stop, pieces, finish, kept = StopFinder(body.stop), [], "cancelled", []
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
        stop, finish = StopFinder(body.stop), "cancelled"
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

    def __init__(
        self, endpoints: Endpoints, pending: PendingRequest, top: int | None, chat: bool
    ) -> None:
        self.endpoints, self.top, self.chat, self.sent = endpoints, top, chat, 0
        self.base = {
            "id": pending.ident,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "model": endpoints.llm.name,
        }

    def event(self, choices: list[dict], **extra: Any) -> str:
        payload = self.base | {"created": int(time.time()), "choices": choices} | extra
        return f"data: {json.dumps(payload)}\n\n"

    def choice(self, text: str, finish: str | None, kept: list[Response], first=False) -> dict:
        delta = {"role": "assistant", "content": text} if first else {"content": text}
        part = {"delta": delta} if self.chat else {"text": text}
        probs = None
        if self.top is not None and kept:
            probs = self.endpoints.logprobs(self.chat, kept, self.sent)
        return {"index": 0, "finish_reason": finish, "logprobs": probs} | part
