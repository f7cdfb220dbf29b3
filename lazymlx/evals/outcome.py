"""One timed generation, the unit every benchmark, eval and calibration run is made of.

Strategies are named as in reports: "baseline" is stock mlx-lm, "lazy:<preset>" the LazyLLM
engine with a preset (lazy:keep-all keeps every token; lazy:off is stock mlx-lm again, as `off`
is everywhere), and "static" / "random" the paper's two comparison strategies run by the same
engine at the schedule of the model's pruning preset (its default, or `gentle` where the
default runs whole).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import mlx.nn as nn
from mlx_lm.tokenizer_utils import TokenizerWrapper

from lazymlx.engine.config import LazyConfig
from lazymlx.evals import strategies
from lazymlx.evals.records import BASELINE
from lazymlx.generation import stream_generate

COMPARISONS = ("static", "random")


@dataclass(frozen=True)
class Strategy:
    """A named way to run a prompt: `config` None is stock mlx-lm."""

    mode: str
    config: LazyConfig | None


def strategy(
    preset: str, model: str, resolve: Callable[[str, str], LazyConfig | None] = strategies.resolve
) -> Strategy:
    """The strategy a preset name stands for in a benchmark or an eval: 'off' is stock mlx-lm,
    as everywhere (a row beside the baseline's, stock run again), 'keep-all' the engine
    keeping every token (what the wrapper and the compact caches cost). `resolve` turns any
    other name into a config (an eval also takes calibrate's rules)."""
    mode = preset if preset in COMPARISONS else f"lazy:{preset}"
    return Strategy(mode, resolve(preset, model))


BASELINE_STRATEGY = Strategy(BASELINE, None)


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
