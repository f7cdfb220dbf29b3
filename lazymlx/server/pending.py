"""One request in flight, as the event loop sees it: its responses as they arrive, keep-alives
while it waits, its usage and its one log line."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request

from lazymlx.generation import Response
from lazymlx.llm import Stream

log = logging.getLogger("lazymlx.server")

_WAITING = object()


class PendingRequest:
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
