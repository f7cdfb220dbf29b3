"""Text generation behind one stream_generate: stock mlx-lm, or the LazyLLM engine.

Both paths time the first token the same way and yield mlx-lm GenerationResponses. The lazy path
runs its own prefill (pruning needs the last prompt token's attention at every pruning layer, which
mlx-lm's chunked prefill never computes) and reuses mlx-lm's samplers and logits processors.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.generate import GenerationResponse
from mlx_lm.generate import stream_generate as mlx_lm_stream_generate
from mlx_lm.sample_utils import make_logits_processors, make_sampler
from mlx_lm.tokenizer_utils import TokenizerWrapper

from lazymlx import engine
from lazymlx.config import LazyConfig
from lazymlx.errors import LazymlxError
from lazymlx.state import LazyState

Prompt = str | Sequence[int] | mx.array


@dataclass(frozen=True)
class LazyStats:
    """What the engine computed, counted from its state (never estimated).

    prefill_fraction: (prompt token, layer) pairs computed in the prompt step ÷ (prompt tokens ×
        layers). cumulative_fraction: the same pairs counted over the generation so far, revivals
        included. max_pair_count: most times any (token, layer) pair was computed; 1 by design.
    """

    prefill_fraction: float
    cumulative_fraction: float
    max_pair_count: int
    kept_per_layer: tuple[int, ...]
    step_pairs: int  # (token, layer) pairs computed in the last step, revived older tokens included
    kv_bytes: int
    aux_bytes: int

    @classmethod
    def of(cls, state: LazyState, prompt: slice, prompt_pairs: int) -> LazyStats:
        total = (prompt.stop - prompt.start) * state.num_layers
        return cls(
            prefill_fraction=prompt_pairs / total,
            cumulative_fraction=int(state.pair_count[prompt].sum()) / total,
            max_pair_count=int(state.pair_count.max(initial=0)),
            kept_per_layer=tuple(state.last_step.present),
            step_pairs=state.last_step.pairs,
            kv_bytes=state.kv_bytes,
            aux_bytes=state.aux_bytes,
        )


@dataclass
class Response(GenerationResponse):
    """mlx-lm's GenerationResponse plus the time to the first token and the engine's counts.

    ttft_s: wall time from the call (prompt already tokenized) to the first token evaluated.
    lazy: the engine's counts after this token; None on the stock mlx-lm path.
    """

    ttft_s: float = 0.0
    lazy: LazyStats | None = None


def encode_prompt(tokenizer: TokenizerWrapper, prompt: Prompt) -> mx.array:
    """Tokens of a raw-text or pre-tokenized prompt (no chat template: that is the caller's choice)."""
    if isinstance(prompt, str):
        bos = tokenizer.bos_token
        tokens = tokenizer.encode(
            prompt, add_special_tokens=bos is None or not prompt.startswith(bos)
        )
    else:
        tokens = prompt
    tokens = mx.array(tokens, dtype=mx.uint32) if not isinstance(tokens, mx.array) else tokens
    if tokens.ndim != 1:
        raise LazymlxError(
            f"the prompt must be one sequence of token ids (batch size 1), got shape {tokens.shape}"
        )
    if tokens.size == 0:
        raise LazymlxError("the prompt is empty; give at least one token")
    return tokens


def cached_length(cache: LazyState | list[Any] | None) -> int:
    """Tokens already in a prompt cache: a LazyState or an mlx-lm cache list."""
    if isinstance(cache, LazyState):
        return cache.offset
    return cache[0].offset if cache else 0


def check_context(model: nn.Module, tokens_in_context: int) -> None:
    """Refuse, before any work, a prompt longer than the model was trained to attend over."""
    limit = getattr(getattr(model, "args", None), "max_position_embeddings", None)
    if limit and tokens_in_context > limit:
        raise LazymlxError(
            f"the prompt needs {tokens_in_context} tokens of context but the model handles at most "
            f"{limit}; shorten the prompt (or /clear the chat)"
        )


def _sampling(
    temp: float, top_p: float, top_k: int, min_p: float, repetition_penalty: float | None
) -> dict[str, Any]:
    if temp < 0:
        raise LazymlxError(f"temperature must be >= 0, got {temp}")
    if not 0 < top_p <= 1:
        raise LazymlxError(f"top_p must be in (0, 1], got {top_p}")
    return {
        "sampler": make_sampler(temp=temp, top_p=top_p, top_k=top_k, min_p=min_p),
        "logits_processors": make_logits_processors(repetition_penalty=repetition_penalty),
    }


def stream_generate(
    model: nn.Module,
    tokenizer: TokenizerWrapper,
    prompt: Prompt,
    max_tokens: int = 256,
    *,
    temp: float = 0.0,
    top_p: float = 1.0,
    top_k: int = 0,
    min_p: float = 0.0,
    repetition_penalty: float | None = None,
    lazy: LazyConfig | None = None,
    **kwargs: Any,
) -> Iterator[Response]:
    """Yield a Response per generated token; the last one has `finish_reason` set.

    lazy: None runs stock mlx-lm; a LazyConfig runs the LazyLLM engine. `prompt_cache` carries
    context between calls: an mlx-lm cache list on the stock path, a LazyState on the lazy one.
    Other keyword arguments (prefill_step_size, ...) go to mlx-lm's generate_step.
    """
    if max_tokens < 1:
        raise LazymlxError(f"max_tokens must be at least 1, got {max_tokens}")
    if not isinstance(tokenizer, TokenizerWrapper):
        tokenizer = TokenizerWrapper(tokenizer)
    tokens = encode_prompt(tokenizer, prompt)
    cache = kwargs.get("prompt_cache")
    if cache is not None and isinstance(cache, LazyState) != (lazy is not None):
        raise LazymlxError(
            "a LazyState prompt_cache goes with lazy=LazyConfig(...), an mlx-lm cache with lazy=None"
        )
    check_context(model, tokens.size + cached_length(cache))
    kwargs.update(_sampling(temp, top_p, top_k, min_p, repetition_penalty))
    mx.reset_peak_memory()
    if lazy is not None:
        state = cache if cache is not None else LazyState(model)
        state.check_memory(tokens.size + state.offset + max_tokens)
        yield from _lazy_responses(state, tokenizer, tokens.tolist(), max_tokens, lazy, **kwargs)
        return
    start = time.perf_counter()
    ttft = None
    for response in mlx_lm_stream_generate(model, tokenizer, tokens, max_tokens, **kwargs):
        if ttft is None:
            ttft = time.perf_counter() - start
        yield Response(**vars(response), ttft_s=ttft)


def _lazy_responses(
    state: LazyState,
    tokenizer: TokenizerWrapper,
    prompt: list[int],
    max_tokens: int,
    config: LazyConfig,
    sampler: Any,
    logits_processors: list[Any],
    **unused: Any,
) -> Iterator[Response]:
    """mlx-lm's stream_generate loop over engine steps: the same tokens, texts and statistics."""
    unused.pop("prompt_cache", None)
    if unused:
        raise LazymlxError(f"not supported with lazy=: {', '.join(sorted(unused))}")
    prompt_range = slice(state.offset, state.offset + len(prompt))
    history = mx.array(prompt, dtype=mx.uint32)  # what mlx-lm shows logits processors: this call

    def sample(logits: mx.array) -> tuple[int, mx.array]:
        nonlocal history
        logits = logits[None]
        for processor in logits_processors:
            logits = processor(history, logits)
        logprobs = logits - mx.logsumexp(logits, keepdims=True)
        token = sampler(logprobs).item()
        history = mx.concatenate([history, mx.array([token], dtype=mx.uint32)])
        return token, logprobs[0]

    start = time.perf_counter()
    token, logprobs = sample(engine.prompt_step(state, prompt, config))
    ttft = time.perf_counter() - start
    prompt_pairs = int(state.pair_count[prompt_range].sum())
    detokenizer = tokenizer.detokenizer
    detokenizer.reset()
    tic = time.perf_counter()
    for n in range(max_tokens):
        stop = token in tokenizer.eos_token_ids
        if not stop:
            detokenizer.add_token(token)
        last = stop or n + 1 == max_tokens
        if last:
            detokenizer.finalize()
        yield Response(
            text=detokenizer.last_segment,
            token=token,
            logprobs=logprobs,
            from_draft=False,
            prompt_tokens=len(prompt),
            prompt_tps=len(prompt) / ttft,
            generation_tokens=n + 1,
            generation_tps=(n + 1) / (time.perf_counter() - tic),
            peak_memory=mx.get_peak_memory() / 1e9,
            finish_reason=("stop" if stop else "length") if last else None,
            ttft_s=ttft,
            lazy=LazyStats.of(state, prompt_range, prompt_pairs),
        )
        if last:
            return
        token, logprobs = sample(engine.decode_step(state, token, config))


def generate(model: nn.Module, tokenizer: TokenizerWrapper, prompt: Prompt, **kwargs: Any) -> str:
    """The whole generated text; takes the same arguments as stream_generate."""
    return "".join(
        response.text for response in stream_generate(model, tokenizer, prompt, **kwargs)
    )
