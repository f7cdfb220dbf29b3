"""The app API: a model loaded once and served to any thread, one generation at a time.

An app has a UI thread that must never block and a model that can only run one generation at a
time (batch 1). `LLM` loads the model on the generation thread (lazymlx/worker.py), which runs
every request in the order they were submitted; `submit` returns at once with a `Stream` the
caller iterates (on any thread) and may `cancel()`. Contexts are kept between requests (lazymlx/contexts.py), so a conversation that
resends its history, as an OpenAI-style client does, only computes its new tokens.

    llm = LLM("smollm2-135m")
    stream = llm.submit(messages=[{"role": "user", "content": "Hi"}], on_progress=show)
    for response in stream:          # on a worker thread; stream.cancel() from the UI
        ui.append(response.text)

Between requests the generation thread completes the kept contexts that pruning left partly
computed (lazymlx/engine/complete.py), least recently used first, one layer chunk at a time, so a
request arriving waits at most for the unit in progress and the next question over a kept
conversation finds its context whole.

In a group of ranks (mlx.launch; lazymlx/parallel/distributed.py) rank 0's LLM takes the requests and hands
each to the other ranks before running it; theirs `follow()` and run the same (idle completion
too, unit by unit, so every rank computes the same rows in the same order). They stop a
cancelled request at the same token or layer as rank 0, and rank 0 beats every HEARTBEAT_S
while idle, so a rank gone is noticed then, not at the next request.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.tokenizer_utils import TokenizerWrapper

from lazymlx.contexts import ContextPool
from lazymlx.engine.config import LazyConfig
from lazymlx.errors import LazymlxError
from lazymlx.generation import (
    GENERATION_LOCK,
    OPTIONS,
    Response,
    check_request,
    context_limit,
    encode_prompt,
    resolve_lazy,
)
from lazymlx.models.registry import DEFAULT_MODEL
from lazymlx.parallel import collectives, distributed
from lazymlx.turn import render_chat, run_turn
from lazymlx.worker import GENERATION_THREAD

Loader = Callable[[], tuple[nn.Module, TokenizerWrapper]]
# what a request may set besides its prompt, max_tokens, lazy, seed, progress and logprobs:
# stream_generate's options but the context and what the LLM builds itself
REQUEST_OPTIONS = OPTIONS - {
    "max_tokens",
    "prompt_cache",
    "prompt_progress_callback",
    "sampler",
    "logits_processors",
    "lazy",
    "arrived",
}
# submit's own keyword arguments, named beside the options when one is unknown
SUBMIT_ARGUMENTS = frozenset(
    {"messages", "max_tokens", "lazy", "on_progress", "seed", "logprobs", "listener"}
    | {"fit_context", "arrived"}
)
Progress = Callable[[int, int], None]
_END = object()
HEARTBEAT_S = 1.0
STOP = {"stop": True}  # rank 0 to the others: serving is over
COMPLETE_UNIT = {"complete": True}  # rank 0 to the others: one unit of idle completion


class Cancelled(Exception):
    """Raised on the generation thread to stop a cancelled request's prefill."""


@dataclass
class Stream:
    """One request's responses, produced on the generation thread, read from any thread.

    Iterating yields `Response`s (text piece, TTFT, tok/s, peak memory, prefill fraction) and
    re-raises the request's error, if any. `cancel()` stops the request at the next token or,
    mid-prefill, at the next layer or chunk; the kept context stays consistent either way. The
    last response of a request cancelled mid-answer has finish_reason "cancelled".
    prompt_tokens: the prompt's tokens; cached_tokens: those reused from a kept context (set
    before the first response); the responses count them the same way.
    """

    prompt_tokens: int = 0
    cached_tokens: int = 0
    max_tokens: int = 0  # the most tokens it may generate (fit_context may have lowered it)
    started: float | None = None  # time.perf_counter() when the generation thread took it up
    generated: int = 0  # responses produced so far
    # called on the generation thread with each response, an error, and None at the end, in
    # place of iterating: how an event loop (the server) is woken without a thread blocked per
    # request and without queueing every response of a long answer
    listener: Callable[[Response | Exception | None], None] | None = None
    _items: queue.SimpleQueue = field(default_factory=queue.SimpleQueue, repr=False)
    _cancel: threading.Event = field(default_factory=threading.Event, repr=False)
    _done: threading.Event = field(default_factory=threading.Event, repr=False)  # all read
    _finished: threading.Event = field(default_factory=threading.Event, repr=False)  # all made
    _responses: list[Response] = field(default_factory=list, repr=False)

    def cancel(self) -> None:
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def _emit(self, item: object) -> None:
        """Hand an item to the reader: the listener if there is one (it then replaces iterating,
        and nothing is queued, so a long answer's responses are not all held), else the queue."""
        if isinstance(item, Response):
            self.generated += 1
        if self.listener is not None:
            self.listener(None if item is _END else item)
        else:
            self._items.put(item)

    @property
    def finished(self) -> bool:
        """Whether the generation thread is done with this request (read or not)."""
        return self._finished.is_set()

    def __iter__(self) -> Iterator[Response]:
        """The responses not read yet (one reader at a time); ends when the request does."""
        while not self._done.is_set():
            item = self._items.get()
            if item is _END:
                self._done.set()
            elif isinstance(item, BaseException):
                self._done.set()
                raise item
            else:
                self._responses.append(item)
                yield item

    def result(self) -> str:
        """Wait for the whole answer; its text (again, if called twice)."""
        for _ in self:
            pass
        return "".join(response.text for response in self._responses)

    @property
    def last(self) -> Response | None:
        """The latest response read (the last one holds the finish reason and final stats)."""
        return self._responses[-1] if self._responses else None


@dataclass
class _Request:
    tokens: list[int]
    lazy: LazyConfig | None
    options: dict[str, Any]
    stream: Stream
    on_progress: Progress | None
    logprobs: int | None
    arrived: float  # time.perf_counter() at its arrival: ttft_s and queued_s count from it


class LLM:
    """A model served from the generation thread; safe to call from any thread.

    model: a registry name, model directory, .gguf or hub id (loaded on the generation thread),
        or a function returning (model, tokenizer), run there too.
    lazy: the default pruning preset (name or LazyConfig; "off" or None is stock mlx-lm).
    context_bytes: how much kept-context memory may be held for prefix reuse.
    idle: complete kept contexts between requests (else only `complete()` does, when called).
    """

    def __init__(
        self,
        model: str | Loader = DEFAULT_MODEL,
        lazy: LazyConfig | str | None = "default",
        context_bytes: int = 2 << 30,
        idle: bool = True,
    ) -> None:
        self.model, self.tokenizer = GENERATION_THREAD.call(
            model if callable(model) else lambda: _load(model)
        )
        # a loader's model names itself (lazymlx.load sets it), so its calibrated presets apply
        self.name = (
            model if isinstance(model, str) else getattr(self.model, "lazymlx_name", "model")
        )
        self.lazy = resolve_lazy(lazy, self.name)
        self.contexts = ContextPool(context_bytes)
        # rank 0 of a group the loader sharded the model over: it hands every request on
        self.leads = collectives.group() is not None and collectives.rank() == 0
        self.closed = False
        if idle and (collectives.group() is None or self.leads):
            GENERATION_THREAD.when_idle(self._complete_unit)
        if self.leads:
            threading.Thread(target=self._heartbeat, name="lazymlx-heartbeat", daemon=True).start()

    def submit(
        self,
        prompt: str | Sequence[int] | None = None,
        *,
        messages: list[dict[str, str]] | None = None,
        max_tokens: int = 256,
        lazy: Any = ...,  # a LazyConfig, a preset name or None; ... means the LLM's own
        on_progress: Progress | None = None,
        seed: int | None = None,
        logprobs: int | None = None,
        listener: Callable[[Response | Exception | None], None] | None = None,
        fit_context: bool = False,
        arrived: float | None = None,
        **options: Any,
    ) -> Stream:
        """Queue a request and return its stream at once.

        prompt: raw text (no chat template) or token ids; messages: a chat, rendered with the
        model's chat template. Exactly one of the two. lazy: this request's preset (default: the
        LLM's). on_progress(done, total) reports prefill progress in prompt tokens; it runs on
        the generation thread, so a UI should hand it to its main thread. logprobs=k sets each
        response's token_logprob and its k likeliest alternatives (top_logprobs). fit_context:
        lower max_tokens to what the model's context leaves after the prompt (the stream's
        max_tokens says what it became). listener: called on the generation thread with each
        response, an error, and None at the end, in place of iterating the stream. arrived: when
        the request arrived (time.perf_counter()), if before this call (a server's receipt);
        each response's ttft_s counts from it (default: now), its queued_s the wait for the
        requests ahead. Other options
        are stream_generate's (temp, top_p, top_k, min_p, repetition_penalty, presence_penalty,
        frequency_penalty, logit_bias, ...). Bad arguments raise LazymlxError here, before
        anything is queued.
        """
        arrived = time.perf_counter() if arrived is None else arrived
        tokens = self._prompt_tokens(prompt, messages)
        limit = context_limit(self.model)
        if fit_context and limit:
            max_tokens = max(1, min(max_tokens, limit - len(tokens)))
        self._check(tokens, max_tokens, logprobs, options, seed)
        config = self.lazy if lazy is ... else resolve_lazy(lazy, self.name)
        if seed is not None:
            options["seed"] = seed
        stream = Stream(prompt_tokens=len(tokens), max_tokens=max_tokens, listener=listener)
        options = {"max_tokens": max_tokens, **options}
        request = _Request(tokens, config, options, stream, on_progress, logprobs, arrived)
        GENERATION_THREAD.submit(lambda: self._job(request))
        return stream

    def _prompt_tokens(
        self, prompt: str | Sequence[int] | None, messages: list[dict[str, str]] | None
    ) -> list[int]:
        """A request's prompt tokens: raw text or token ids as they are, a chat rendered."""
        if (prompt is None) == (messages is None):
            raise LazymlxError("give either prompt= (raw text or token ids) or messages= (a chat)")
        if messages is not None:
            return render_chat(self.tokenizer, messages, "send prompt= text instead")
        return encode_prompt(self.tokenizer, prompt).tolist()

    def _check(
        self,
        tokens: list[int],
        max_tokens: int,
        logprobs: int | None,
        options: dict[str, Any],
        seed: int | None,
    ) -> None:
        """Refuse a request before it is queued: stream_generate's checks (lazymlx/generation.py),
        the seed's limits among its sampling values, with submit's own arguments beside its
        options, then submit's own."""
        takes = REQUEST_OPTIONS | SUBMIT_ARGUMENTS
        unknown = "unknown option {names}; submit takes {takes}"
        sampled = options | {"seed": seed}
        check_request(self.model, tokens, max_tokens, sampled, takes=takes, unknown=unknown)
        if logprobs is not None and not 0 <= logprobs <= len(self.tokenizer):
            raise LazymlxError(f"logprobs is how many alternatives to give, >= 0; got {logprobs}")
        if self.leads:
            try:
                json.dumps(options)
            except TypeError:
                raise LazymlxError(
                    "a group of ranks hands each request to every rank, so its options must be "
                    "numbers, strings, lists and dicts; leave objects out"
                ) from None

    def generate(self, prompt: str | Sequence[int] | None = None, **kwargs: Any) -> str:
        """Submit and wait: the whole answer."""
        return self.submit(prompt, **kwargs).result()

    def follow(self) -> None:
        """Serve as a group's other rank: run each request rank 0 hands on, until it stops."""
        GENERATION_THREAD.call(self._follow)

    def close(self) -> None:
        """Stop serving: no more idle completion (the unit in progress is waited for, so nothing
        of this LLM runs on the generation thread afterwards); rank 0 of a group tells the other
        ranks, which then return from follow(). Closing twice is harmless."""
        GENERATION_THREAD.stop_idle(self._complete_unit)
        if self.leads and not self.closed:
            GENERATION_THREAD.call(self._stop)
        self.closed = True

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def complete(self) -> None:
        """Finish completing the kept contexts now (idle time does it anyway, a unit at a time):
        before timing the next request, say, or before the app sleeps."""
        GENERATION_THREAD.call(self._complete_all)

    def _complete_all(self) -> None:
        while self._complete_unit():
            pass

    def _complete_unit(self, chunk: int | None = None) -> bool:
        """One unit of completing the kept contexts, least recently used first (lazymlx/
        complete.py); whether any is still incomplete. Rank 0 paces its units (chunk None) and
        has the other ranks of a group run the same unit, of the same tokens."""
        from lazymlx.engine.complete import next_chunk, step

        for context in self.contexts.contexts:
            if not context.complete:
                if self.leads and chunk is None:
                    collectives.share(COMPLETE_UNIT | {"chunk": next_chunk(context.cache)})
                try:
                    with GENERATION_LOCK:  # no other thread's generation meanwhile
                        step(context.cache, context.config, chunk=chunk)
                except Exception as error:  # a context a unit failed on is not trusted again
                    self.contexts.contexts.remove(context)
                    if collectives.group() is not None:  # every rank ends alike
                        distributed.fail(error)
                    raise
                return True
        return False

    def _follow(self) -> None:
        try:
            while (message := collectives.share()) != STOP:
                if message is None:  # rank 0's heartbeat
                    continue
                if message.get("complete"):
                    self._complete_unit(message["chunk"])
                    continue
                # an error here rank 0 met too, from the same input, and told its client
                with contextlib.suppress(LazymlxError, Cancelled):
                    self._serve(_shared_request(message))
        except BaseException as error:
            distributed.fail(error)

    def _stop(self) -> None:
        self.closed = True
        collectives.share(STOP)

    def _heartbeat(self) -> None:
        while not self.closed:
            time.sleep(HEARTBEAT_S)
            beat = threading.Event()
            GENERATION_THREAD.submit(lambda beat=beat: self._beat(beat))
            beat.wait()

    def _beat(self, beat: threading.Event) -> None:
        try:
            if not self.closed:
                collectives.share(None)
        except BaseException as error:
            distributed.fail(error)
        finally:
            beat.set()

    def _job(self, request: _Request) -> None:
        """A request on the generation thread: its errors go to its stream, never kill the thread
        (in a group, an error met on rank 0 alone ends every rank: they would part ways)."""
        try:
            self._serve(request)
        except BaseException as error:  # even a KeyboardInterrupt from a progress callback
            if self.leads and not isinstance(error, LazymlxError | Cancelled):
                distributed.fail(error)
            request.stream._emit(error if isinstance(error, Exception) else Cancelled())
        finally:
            request.stream._emit(_END)
            request.stream._finished.set()

    def _serve(self, request: _Request) -> None:
        stream = request.stream
        stream.started = time.perf_counter()
        if stream.cancelled:
            return
        if self.leads:
            collectives.share(_message(request))
        options = dict(request.options)
        if "seed" in options:
            mx.random.seed(options.pop("seed"))
        context = self.contexts.take(self.model, request.tokens, request.lazy)

        def progress(done: int, total: int) -> None:
            if collectives.anyone(_stopping(stream)):  # every rank stops at the same layer
                raise Cancelled
            if request.on_progress is not None:
                request.on_progress(done, total)

        turn = run_turn(
            self.model,
            self.tokenizer,
            context,
            request.tokens,
            on_reuse=lambda cached: setattr(stream, "cached_tokens", cached),
            lazy=request.lazy,
            prompt_progress_callback=progress,
            arrived=request.arrived,
            **options,
        )
        try:
            with contextlib.closing(turn):
                for response in turn:
                    if request.logprobs is not None:
                        response = _with_logprobs(response, request.logprobs)
                    stop = collectives.anyone(_stopping(stream))  # and at the same token
                    if stop and response.finish_reason is None:
                        response.finish_reason = "cancelled"
                    stream._emit(response)
                    if stop:
                        break
        except Cancelled:
            pass
        finally:
            self.contexts.put(context)


def _stopping(stream: Stream) -> bool:
    """Whether a request should stop: cancelled, or the interpreter is exiting (the generation
    thread must be out of MLX before it finalizes)."""
    return stream.cancelled or GENERATION_THREAD.exiting


def _message(request: _Request) -> dict[str, Any]:
    """A request as rank 0 hands it to the other ranks of its group."""
    lazy = None if request.lazy is None else dataclasses.asdict(request.lazy)
    return {
        "tokens": request.tokens,
        "lazy": lazy,
        "options": request.options,
        "logprobs": request.logprobs,
    }


def _shared_request(message: dict[str, Any]) -> _Request:
    """The request rank 0 handed on, to run as it runs it; its responses go nowhere."""
    options = message["options"]
    if options.get("logit_bias"):  # JSON made its token ids strings
        options["logit_bias"] = {int(token): bias for token, bias in options["logit_bias"].items()}
    lazy = None if message["lazy"] is None else LazyConfig(**message["lazy"])
    stream = Stream(listener=lambda item: None)
    return _Request(
        message["tokens"], lazy, options, stream, None, message["logprobs"], time.perf_counter()
    )


def _with_logprobs(response: Response, top: int) -> Response:
    """The response with its token's log-probability and the `top` likeliest (picked as mlx-lm's
    server picks them: an argpartition), likeliest first, as host numbers."""
    vector = response.logprobs
    top = min(top, vector.size)
    ids = mx.argpartition(-vector, kth=top - 1)[:top].tolist() if top > 0 else []
    likeliest = zip(ids, vector[ids].tolist(), strict=True) if ids else ()
    pairs = sorted(likeliest, key=lambda p: -p[1])
    return dataclasses.replace(
        response, token_logprob=vector[response.token].item(), top_logprobs=tuple(pairs)
    )


def _load(model: str) -> tuple[nn.Module, TokenizerWrapper]:
    from lazymlx.models.loading import load

    return load(model)
