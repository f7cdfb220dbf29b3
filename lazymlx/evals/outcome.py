"""One timed generation, the unit every benchmark, eval and calibration run is made of, under a
strategy (lazymlx/evals/strategies.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import mlx.nn as nn
from mlx_lm.tokenizer_utils import TokenizerWrapper

from lazymlx.engine.config import LazyConfig
from lazymlx.generation import stream_generate


@dataclass
class Outcome:
    """What the scored step of a case produced and cost."""

    text: str
    tokens: list[int]
    prompt_tokens: int  # the context at the scored step: every token before its answer
    ttft_s: float  # the scored step's time to first token
    compute_fraction: float  # the whole case's (token, layer) work ÷ stock's (1 for stock)
    step_fraction: float  # the scored prompt step's work ÷ stock's for that step
    generation_tps: float = 0.0
    peak_memory_gb: float = 0.0
    first_ttft_s: float = 0.0  # multi-turn: the first turn's TTFT
    completion_s: float = 0.0  # multi-turn: idle time spent completing before the scored step
    context: list[int] | None = None  # the scored step's prompt: every token before its answer


@dataclass
class Run:
    """What one generation measured; `compute_fraction` is the engine's count (1 for stock),
    `pruned` whether pruning changed anything (None: stock mlx-lm, which has nothing to prune)."""

    prompt_tokens: int
    ttft_s: float
    prompt_tps: float
    generation_tps: float
    peak_memory_gb: float
    compute_fraction: float
    pruned: bool | None = None
    tokens: list[int] = field(default_factory=list)
    text: str = ""


def run_once(
    model: nn.Module,
    tokenizer: TokenizerWrapper,
    prompt: list[int],
    max_tokens: int,
    config: LazyConfig | None,
    prompt_cache: Any = None,
) -> Run:
    """Greedy generation of up to `max_tokens` tokens; stops at eos like any generation.
    `prompt_cache` carries a context between calls (a LazyState with a config, an mlx-lm cache
    list without), as `stream_generate` takes it: a later question over a kept document."""
    tokens, pieces, last = [], [], None
    steps = stream_generate(
        model, tokenizer, prompt, max_tokens=max_tokens, lazy=config, prompt_cache=prompt_cache
    )
    for last in steps:
        tokens.append(last.token)
        pieces.append(last.text)
    return Run(
        prompt_tokens=last.prompt_tokens,
        ttft_s=last.ttft_s,
        prompt_tps=last.prompt_tps,
        # one token is no decode at all: mlx-lm would divide 1 by a few microseconds
        generation_tps=last.generation_tps if last.generation_tokens > 1 else 0.0,
        peak_memory_gb=last.peak_memory,
        compute_fraction=last.lazy.work_share if last.lazy else 1.0,
        pruned=last.lazy.pruned if last.lazy else None,
        tokens=tokens,
        text="".join(pieces),
    )
