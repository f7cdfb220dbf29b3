"""Text generation with time-to-first-token measured; mlx-lm does the work (the baseline path)."""

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

from lazymlx.errors import LazymlxError

Prompt = str | Sequence[int] | mx.array


@dataclass
class Response(GenerationResponse):
    """mlx-lm's GenerationResponse plus the time to the first token.

    ttft_s: wall time from the call (prompt already tokenized) to the first token evaluated.
    """

    ttft_s: float = 0.0


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
    **kwargs: Any,
) -> Iterator[Response]:
    """Yield a Response per generated token; the last one has `finish_reason` set.

    Extra keyword arguments (prompt_cache, prefill_step_size, ...) go to mlx-lm's generate_step.
    """
    if max_tokens < 1:
        raise LazymlxError(f"max_tokens must be at least 1, got {max_tokens}")
    if not isinstance(tokenizer, TokenizerWrapper):
        tokenizer = TokenizerWrapper(tokenizer)
    tokens = encode_prompt(tokenizer, prompt)
    cache = kwargs.get("prompt_cache")
    check_context(model, tokens.size + (cache[0].offset if cache else 0))
    kwargs.update(_sampling(temp, top_p, top_k, min_p, repetition_penalty))
    mx.reset_peak_memory()
    start = time.perf_counter()
    ttft = None
    for response in mlx_lm_stream_generate(model, tokenizer, tokens, max_tokens, **kwargs):
        if ttft is None:
            ttft = time.perf_counter() - start
        yield Response(**vars(response), ttft_s=ttft)


def generate(model: nn.Module, tokenizer: TokenizerWrapper, prompt: Prompt, **kwargs: Any) -> str:
    """The whole generated text; takes the same arguments as stream_generate."""
    return "".join(
        response.text for response in stream_generate(model, tokenizer, prompt, **kwargs)
    )
