"""Text generation behind one stream_generate: stock mlx-lm, or LazyLLM on mlx-lm's own loop.

Both paths are mlx-lm's stream_generate: the lazy one hands it the model wrapped (LazyModel,
whose prompt call is the lazy prompt step) and the lazy context as its prompt cache, so sampling,
logits processors, pipelining and GenerationResponse are mlx-lm's. Both time the first token the
same way.

Safe from any thread: one generation runs at a time in a process (a call holds GENERATION_LOCK
from its first token to its last, or until the caller stops iterating), and a call from a thread
other than the main one runs on the long-lived generation thread (lazymlx/worker.py), since MLX
aborts the process at exit when a thread that evaluated arrays has ended.
"""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.generate import GenerationResponse, generate_step
from mlx_lm.generate import stream_generate as mlx_lm_stream_generate
from mlx_lm.sample_utils import make_logits_processors, make_sampler
from mlx_lm.tokenizer_utils import TokenizerWrapper

from lazymlx.engine.cache import LazyState
from lazymlx.engine.config import LazyConfig
from lazymlx.engine.model import LazyModel, PromptCounts
from lazymlx.engine.prefill import PREFILL_CHUNK
from lazymlx.engine.templates import question_length, template_tail
from lazymlx.errors import LazymlxError
from lazymlx.sampling import check_sampling, check_value
from lazymlx.worker import GENERATION_THREAD

Prompt = str | Sequence[int] | mx.array
GENERATION_LOCK = threading.RLock()
# what mlx-lm's generate_step takes besides the prompt, model and sampling we build ourselves
STEP_OPTIONS = frozenset(inspect.signature(generate_step).parameters) - {"prompt", "model"}
# what stream_generate turns into mlx-lm's sampler and logits processors
SAMPLING_OPTIONS = frozenset(
    {"temp", "top_p", "top_k", "min_p"}
    | {"repetition_penalty", "presence_penalty", "frequency_penalty", "logit_bias"}
)
# every keyword argument stream_generate takes: the one list a request's options are checked on
OPTIONS = SAMPLING_OPTIONS | {"lazy", "arrived"} | STEP_OPTIONS
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class LazyStats:
    """What the engine computed, read from the context (never estimated). Each (token, layer)
    pair below a token's depth was computed exactly once, so pairs are depths.

    work_share: every pair computed in the context so far ÷ stock's (its tokens × layers), at
        the end of this call's prompt step: the whole conversation's work against stock's,
        never above 1. What pruning saved is 1 - work_share.
    revived_tokens: earlier tokens (pruned by an earlier step) this call's prompt step brought
        back, computing the layers they had skipped.
    step_share: the prompt step's own pairs (its tokens' and the revived ones') ÷ stock's for
        its tokens; above 1 when it revived. The eval's measure of one step, not shown to users.
    kv_rows_per_layer: the tokens each layer's cache holds after this call's prompt step.
    how: why the prompt step pruned what it did ("short prompt", "no look-up", "spread
        attention", where its first cut fell), the pruning policy's words; "" where it did not
        say (stock's path, a step over a context).
    """

    work_share: float
    revived_tokens: int
    step_share: float
    kv_rows_per_layer: tuple[int, ...]
    kv_bytes: int
    aux_bytes: int
    how: str = ""

    @property
    def pruned(self) -> bool:
        """Whether pruning changed anything so far (else the figures say nothing)."""
        return self.work_share < 1 or self.revived_tokens > 0

    def said(self) -> str:
        """The figure a stats line gives (the chat's, generate's, the server's log line): the
        share of stock's work with the pruned tokens brought back, or, where a preset runs
        whole (a default that prunes nothing, a prompt under its gate), that it pruned
        nothing and why ("pruned nothing: no look-up"), so a user who asked for pruning is
        never left to guess."""
        if not self.pruned:
            return "pruned nothing" + (f": {self.how}" if self.how else "")
        if self.revived_tokens:
            return f"{self.work_share:.0%} work, {self.revived_tokens} revived"
        return f"{self.work_share:.0%} of the work"

    @classmethod
    def of(cls, state: LazyState, counts: PromptCounts, prompt_tokens: int) -> LazyStats:
        """The figures after a call's prompt step (`counts`, what it computed) over `state`."""
        layers = state.num_layers
        return cls(
            work_share=(counts.pairs_before + counts.pairs)
            / ((counts.start + prompt_tokens) * layers),
            revived_tokens=counts.revived,
            step_share=counts.pairs / (prompt_tokens * layers),
            kv_rows_per_layer=tuple(cache.rows for cache in state.layers),
            kv_bytes=state.kv_bytes,
            aux_bytes=state.aux_bytes,
            how=counts.how,
        )


@dataclass
class Response(GenerationResponse):
    """mlx-lm's GenerationResponse plus the time to the first token and the engine's counts.

    prompt_tokens: the prompt's tokens, those already in `prompt_cache` included (as OpenAI's
        usage counts them, and the CLI and server report them); cached_tokens: how many of them
        the cache held before the call, so were not computed again; prompt_tps: mlx-lm's, the
        tokens computed (prompt_tokens - cached_tokens) per second of prefill.
    ttft_s: wall time from the request's arrival (the call, or `arrived`: an `LLM`'s submit, a
        server's receipt) to the first token evaluated, queued_s included: what its caller waited.
    queued_s: the part of ttft_s spent waiting for the model (behind an `LLM`'s earlier requests,
        for the generation thread, for another thread's generation to end).
    lazy: the engine's counts after this token; None on the stock mlx-lm path.
    finish_reason: mlx-lm's "stop" or "length" on the last response; "cancelled" on the last
        response of an `LLM` request cancelled mid-answer.
    token_logprob, top_logprobs: with `LLM.submit(logprobs=k)`, this token's log-probability
        and the k likeliest (token id, log-probability), likeliest first, read from `logprobs`
        on the generation thread so any thread can use them; else None and ().
    """

    ttft_s: float = 0.0
    queued_s: float = 0.0
    lazy: LazyStats | None = None
    cached_tokens: int = 0
    token_logprob: float | None = None
    top_logprobs: tuple[tuple[int, float], ...] = ()


def encode_prompt(tokenizer: TokenizerWrapper, prompt: Prompt) -> mx.array:
    """Tokens of a raw-text or pre-tokenized prompt (no chat template: that is the caller's choice)."""
    if isinstance(prompt, str):
        check_text(prompt)
        bos = tokenizer.bos_token
        tokens = tokenizer.encode(
            prompt, add_special_tokens=bos is None or not prompt.startswith(bos)
        )
    else:
        tokens = prompt
    if not isinstance(tokens, mx.array):
        ids = list(tokens)
        bad = [t for t in ids if not isinstance(t, int) or isinstance(t, bool) or t < 0]
        if bad:
            raise LazymlxError(f"token ids are whole numbers >= 0; got {bad[0]!r}")
        tokens = mx.array(ids, dtype=mx.uint32)
    if tokens.ndim != 1:
        raise LazymlxError(
            f"the prompt must be one sequence of token ids (batch size 1), got shape {tokens.shape}"
        )
    if tokens.size == 0:
        raise LazymlxError("the prompt is empty; give at least one token")
    return tokens


def check_text(text: str) -> None:
    """Refuse text that is not valid Unicode: bytes that were not UTF-8 reach Python as lone
    surrogates (a terminal in another encoding, `-p $'\\xff'`), which no tokenizer can encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        bad = text[error.start]
        byte = f"0x{ord(bad) - 0xDC00:02x}" if 0xDC80 <= ord(bad) <= 0xDCFF else repr(bad)
        raise LazymlxError(
            f"the text is not valid UTF-8 (byte {byte} at character {error.start}); "
            "send UTF-8 text (check the terminal's or file's encoding)"
        ) from None


def resolve_lazy(lazy: LazyConfig | str | None, model: str | None) -> LazyConfig | None:
    """lazy= as a config, a preset name of this model ('off' is stock mlx-lm; a registry
    model's calibrated ones too), or None (stock mlx-lm)."""
    if lazy is None or isinstance(lazy, LazyConfig):
        return lazy
    if isinstance(lazy, str):
        from lazymlx.engine.presets import lazy_config

        return lazy_config(lazy, model)
    raise LazymlxError(f"lazy= takes a LazyConfig or a preset name, got {type(lazy).__name__}")


def cached_length(cache: list[Any] | None) -> int:
    """Tokens already in a prompt cache (a LazyState or an mlx-lm cache list)."""
    return cache[0].offset if cache else 0


def context_limit(model: nn.Module) -> int | None:
    """The most tokens the model was trained to attend over (None: its config doesn't say)."""
    return getattr(getattr(model, "args", None), "max_position_embeddings", None)


def check_context(model: nn.Module, tokens_in_context: int) -> None:
    """Refuse, before any work, a prompt longer than the model was trained to attend over."""
    limit = context_limit(model)
    if limit and tokens_in_context > limit:
        raise LazymlxError(
            f"the prompt needs {tokens_in_context} tokens of context but the model handles at most "
            f"{limit}; shorten the prompt (or /clear the chat)"
        )


def check_vocabulary(model: nn.Module, largest_id: int) -> None:
    """Refuse a token id the model's embedding has no row for (it would read past the table)."""
    vocab = getattr(getattr(model, "args", None), "vocab_size", None)
    if vocab and largest_id >= vocab:
        raise LazymlxError(
            f"token id {largest_id} is not in the model's vocabulary (0 to {vocab - 1})"
        )


def check_logit_bias(model: nn.Module, logit_bias: dict[int, float] | None) -> None:
    """Refuse a logit bias on a token id the model does not have."""
    if not logit_bias:
        return
    bad = [t for t in logit_bias if not isinstance(t, int) or isinstance(t, bool) or t < 0]
    if bad:
        raise LazymlxError(f"logit_bias maps token ids (whole numbers >= 0); got {bad[0]!r}")
    check_vocabulary(model, max(logit_bias))


def check_request(
    model: nn.Module,
    tokens: Sequence[int] | mx.array,
    max_tokens: int,
    options: Mapping[str, Any],
    cached: int = 0,
    takes: Collection[str] = OPTIONS,
    unknown: str = "unknown keyword argument{s} {names}; stream_generate takes {takes}",
) -> None:
    """Refuse, before any work, a request the model cannot run: no room to generate, an option
    not among `takes` (said with the `unknown` message), a sampling value outside its limits
    (lazymlx/sampling.py), a prefill step of no tokens, a prompt (after `cached` tokens of
    context) longer than the model's context, a token id or logit bias outside its vocabulary.
    `LLM.submit` checks its requests here before queueing them."""
    check_value("max_tokens", max_tokens)
    names = sorted(set(options) - set(takes))
    if names:
        raise LazymlxError(
            unknown.format(
                s="s" * (len(names) > 1), names=", ".join(names), takes=", ".join(sorted(takes))
            )
        )
    check_sampling(options)
    if options.get("prefill_step_size", PREFILL_CHUNK) < 1:  # mlx-lm would loop forever
        raise LazymlxError(
            f"prefill_step_size must be at least 1, got {options['prefill_step_size']}"
        )
    check_context(model, len(tokens) + cached)
    if len(tokens):
        largest = tokens.max().item() if isinstance(tokens, mx.array) else max(tokens)
        check_vocabulary(model, largest)
    check_logit_bias(model, options.get("logit_bias"))


def _sampling(
    temp: float = 0.0,
    top_p: float = 1.0,
    top_k: int = 0,
    min_p: float = 0.0,
    repetition_penalty: float | None = None,
    presence_penalty: float | None = None,
    frequency_penalty: float | None = None,
    logit_bias: dict[int, float] | None = None,
) -> dict[str, Any]:
    """mlx-lm's sampler and logits processors for the sampling options (check_request has
    checked their values)."""
    processors = make_logits_processors(
        logit_bias,
        repetition_penalty,
        presence_penalty=presence_penalty,
        frequency_penalty=frequency_penalty,
    )
    return {
        "sampler": make_sampler(temp=temp, top_p=top_p, top_k=top_k, min_p=min_p),
        "logits_processors": processors,
    }


def stream_generate(
    model: nn.Module,
    tokenizer: TokenizerWrapper,
    prompt: Prompt,
    max_tokens: int = 256,
    **kwargs: Any,
) -> Iterator[Response]:
    """Yield a Response per generated token; the last one has `finish_reason` set.

    Keyword arguments: temp, top_p, top_k, min_p (mlx-lm's make_sampler); repetition_penalty,
    presence_penalty, frequency_penalty, logit_bias ({token id: bias}) (mlx-lm's
    make_logits_processors); lazy: None (or "off") runs stock mlx-lm, a LazyConfig or a preset
    name runs the lazy prompt step and then mlx-lm's own decode loop over the lazy context
    (lazymlx/engine/model.py); prompt_cache carries context between calls (an mlx-lm cache list on the
    stock path, a LazyState on the lazy one); the rest (prefill_step_size,
    prompt_progress_callback, ...) go to mlx-lm's generate_step. prompt_progress_callback(done,
    total) is called with 0 first, then per prefill chunk (stock) or per layer (the lazy step).
    arrived: when the request arrived (time.perf_counter()), where it waited before this call (an
    app's own queue); the wait from then counts in ttft_s and queued_s (default: the call).
    """
    kwargs.setdefault("arrived", time.perf_counter())
    here = threading.current_thread() is threading.main_thread()
    if here or GENERATION_THREAD.is_current():
        yield from _stream_generate(model, tokenizer, prompt, max_tokens, **kwargs)
    else:
        yield from GENERATION_THREAD.relay(
            lambda: _stream_generate(model, tokenizer, prompt, max_tokens, **kwargs)
        )


def _stream_generate(
    model: nn.Module,
    tokenizer: TokenizerWrapper,
    prompt: Prompt,
    max_tokens: int = 256,
    *,
    lazy: LazyConfig | str | None = None,
    arrived: float,
    **options: Any,
) -> Iterator[Response]:
    waited = time.perf_counter() - arrived  # for the generation thread (another thread's call)
    lazy = resolve_lazy(lazy, getattr(model, "lazymlx_name", None))
    if not isinstance(tokenizer, TokenizerWrapper):
        tokenizer = TokenizerWrapper(tokenizer)
    tokens = encode_prompt(tokenizer, prompt)
    cache = options.get("prompt_cache")
    if cache is not None and isinstance(cache, LazyState) != (lazy is not None):
        raise LazymlxError(
            "a LazyState prompt_cache goes with lazy=LazyConfig(...), an mlx-lm cache with lazy=None"
        )
    check_request(model, tokens, max_tokens, options, cached=cached_length(cache))
    kwargs = _sampling(**{name: options.pop(name) for name in SAMPLING_OPTIONS if name in options})
    kwargs |= options
    report_start = None  # mlx-lm's generate_step reports 0 done first; the lazy step only per layer
    if lazy is not None:
        model, report_start = lazy_model(model, tokenizer, tokens, max_tokens, lazy, kwargs)
    yield from _timed(model, tokenizer, tokens, max_tokens, kwargs, waited, report_start)


def lazy_model(
    model: nn.Module,
    tokenizer: TokenizerWrapper,
    tokens: mx.array,
    max_tokens: int,
    lazy: LazyConfig,
    kwargs: dict[str, Any],
) -> tuple[LazyModel, Progress | None]:
    """The model wrapped for the lazy prompt step over its context (kwargs' prompt_cache, else a
    new one, set there), and the progress callback to report the step's start with when the
    step reports per layer (mlx-lm's own per-chunk reports are then turned off in kwargs)."""
    unsupported = sorted(k for k in ("kv_bits", "max_kv_size", "draft_model") if kwargs.get(k))
    if unsupported:
        raise LazymlxError(f"not supported with lazy=: {', '.join(unsupported)}")
    state = kwargs.get("prompt_cache")
    state = state if state is not None else LazyState(model)
    state.check_memory(tokens.size + state.offset + max_tokens)
    kwargs["prompt_cache"] = state
    chunk = kwargs.get("prefill_step_size", PREFILL_CHUNK)
    progress = kwargs.get("prompt_progress_callback")
    tail = template_tail(tokenizer, tokens)
    asked = question_length(tokenizer, tokens, tail) if lazy.point else 0
    wrapped = LazyModel(model, state, lazy, tokens.size, chunk, progress, tail, asked)
    if wrapped.lazy_prompt and progress is not None:  # it counts layer by layer instead
        kwargs["prompt_progress_callback"] = None
        return wrapped, progress
    return wrapped, None


def _timed(
    model: nn.Module,
    tokenizer: TokenizerWrapper,
    tokens: mx.array,
    max_tokens: int,
    kwargs: dict[str, Any],
    waited: float,
    report_start: Progress | None,
) -> Iterator[Response]:
    """mlx-lm's stream_generate under GENERATION_LOCK, each response with the time to the
    first token (the wait for the lock and `waited` before it included) and the lazy engine's
    counts when `model` is the lazy wrapper."""
    cached = cached_length(kwargs.get("prompt_cache"))
    locking = time.perf_counter()
    with GENERATION_LOCK:
        try:
            mx.reset_peak_memory()
            start = time.perf_counter()
            queued = waited + start - locking  # and for another thread's generation to end
            if report_start is not None:
                report_start(0, tokens.size)
            ttft, stats = None, None
            for response in mlx_lm_stream_generate(model, tokenizer, tokens, max_tokens, **kwargs):
                if ttft is None:
                    ttft = queued + time.perf_counter() - start
                if isinstance(model, LazyModel):  # host-side counts: no device read while
                    stats = LazyStats.of(model.context, model.counts, tokens.size)  # it pipelines
                counts = vars(response) | {"prompt_tokens": cached + tokens.size}
                yield Response(
                    **counts, cached_tokens=cached, ttft_s=ttft, queued_s=queued, lazy=stats
                )
        finally:
            mx.synchronize()  # a caller that stops early leaves a decode step in flight


def generate(
    model: nn.Module,
    tokenizer: TokenizerWrapper,
    prompt: Prompt,
    verbose: bool = False,
    **kwargs: Any,
) -> str:
    """The whole generated text; takes the same arguments as stream_generate.

    verbose: as mlx-lm's generate, print the text as it comes, then the prompt and generation
    speeds and the peak memory, in mlx-lm's words.
    """
    pieces, last = [], None
    for last in stream_generate(model, tokenizer, prompt, **kwargs):
        pieces.append(last.text)
        if verbose:
            print(last.text, end="", flush=True)
    if verbose and last is not None:
        print()
        print("=" * 10)
        cached = f" ({last.cached_tokens} cached)" if last.cached_tokens else ""
        print(f"Prompt: {last.prompt_tokens} tokens{cached}, {last.prompt_tps:.3f} tokens-per-sec")
        print(
            f"Generation: {last.generation_tokens} tokens, {last.generation_tps:.3f} tokens-per-sec"
        )
        print(f"Peak memory: {last.peak_memory:.3f} GB")
    return "".join(pieces)
