"""The timing harness behind `lazymlx bench`: TTFT and friends, stock mlx-lm next to each strategy.

For every length, one prompt runs through the baseline and each strategy back to back, `repeats`
times, after one untimed warm-up of every strategy on the same prompt (as llama-bench warms up
before timing; at the timed length, so every path and buffer size a timed run meets has run). Rows report means ± standard deviations; a speedup is the baseline's
mean TTFT over the strategy's, measured in the same run.
"""

from __future__ import annotations

import platform
import statistics
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx_lm.tokenizer_utils import TokenizerWrapper

from lazymlx.engine.presets import resolve_preset, saved_presets, shipped_presets
from lazymlx.errors import LazymlxError
from lazymlx.evals.cases import make_case, prompt_tokens
from lazymlx.evals.families import SINGLE_PROMPT
from lazymlx.evals.outcome import Run, run_once
from lazymlx.evals.strategies import BASELINE_STRATEGY, Strategy
from lazymlx.generation import encode_prompt
from lazymlx.platform import backend, blas_name, device_name
from lazymlx.prompts import holds_answer

PROMPT_KINDS = (*SINGLE_PROMPT, "random")
PROMPT_SEED = 2  # the asked fact at mid depth (0.5)
# `--prompt workload`: what people paste, one prompt of each kind, through the chat template
# where the model has one: questions whose answers a real manual, several retrieved manuals and
# real source code state, a summary and an open question about a document, and a planted
# look-up (the passkey), the one kind the field's needle tests time.
WORKLOAD = {
    "real-option": "a question about a manual",
    "real-pick": "a question over several documents",
    "real-function": "a question about source code",
    "real-value": "a value in source code",
    "summary": "a summary of a document",
    "question": "an open question about a document",
    "passkey": "a planted look-up",
}


def prompt_kinds(prompt: str) -> list[str]:
    """The prompts `--prompt` names: one kind or file, a comma list, or `workload`."""
    if prompt == "workload":
        return list(WORKLOAD)
    return [kind.strip() for kind in prompt.split(",") if kind.strip()]


@dataclass(frozen=True)
class BenchPrompt:
    tokens: list[int]
    answer: str | None  # the gold answer of a retrieval prompt, None for random tokens or a file
    aliases: tuple[str, ...] = ()  # other right answers (an option's short flag)

    def right(self, text: str) -> bool | None:
        """Whether an output holds the answer (or an alias); None where there is none."""
        if self.answer is None:
            return None
        return any(holds_answer(text, answer) for answer in (self.answer, *self.aliases))


def bench_prompt(tokenizer: TokenizerWrapper, kind: str, length: int) -> BenchPrompt:
    """A prompt of about `length` tokens: one task of the eval (a passkey retrieval, a constant
    asked of real source code, a fact in real documentation...), random tokens, or a text
    file's start.

    A task is the default because random tokens say nothing about what pruning costs, and its
    gold answer checks each timed run's output.
    """
    if kind in SINGLE_PROMPT:
        case = make_case(kind, tokenizer, length, PROMPT_SEED, "calibration")
        return BenchPrompt(prompt_tokens(tokenizer, case), case.gold, case.aliases)
    if kind == "random":
        special = max(tokenizer.all_special_ids, default=0) + 1
        rng = np.random.default_rng(length)
        return BenchPrompt(rng.integers(special, len(tokenizer.vocab), size=length).tolist(), None)
    path = Path(kind).expanduser()
    if not path.is_file():
        raise LazymlxError(
            f"--prompt {kind!r} is neither a one-prompt task ({', '.join(PROMPT_KINDS)}) nor a "
            "readable file; pass one of those or a path to a text file"
        )
    tokens = encode_prompt(tokenizer, path.read_text(errors="replace")).tolist()
    if len(tokens) < length:
        raise LazymlxError(
            f"{path} has {len(tokens)} tokens, fewer than the {length} asked for; "
            "pass a shorter --prompt-len or a longer file"
        )
    return BenchPrompt(tokens[:length], None)


def header(model_name: str, **settings) -> dict:
    """Where and with what a benchmark ran, for the report's header and the JSON."""
    import mlx_lm

    import lazymlx

    return {
        "device": device_name(),
        "backend": backend(),
        "blas": blas_name(),
        "model": model_name,
        "mlx": mx.__version__,
        "mlx_lm": mlx_lm.__version__,
        "lazymlx": lazymlx.__version__,
        "python": platform.python_version(),
        "date": date.today().isoformat(),
    } | settings


def bench(
    model: nn.Module,
    tokenizer: TokenizerWrapper,
    lengths: list[int],
    strategies: list[Strategy],
    prompt_kind: str = "passkey",
    gen_len: int = 128,
    repeats: int = 1,
    on_run: Callable[[str], None] | None = None,
    where: Callable[[Strategy], AbstractContextManager] | None = None,
) -> list[dict]:
    """One row per (length, prompt, strategy), the baseline first; with several prompts (a
    comma list, or `workload`) a row per (length, strategy) after them with the geometric mean
    of the TTFT ratios and the mean work share. Every strategy warms up once per length, on
    its first prompt. `where` gives the context each strategy's runs happen in (a
    context-parallel group: the chain or rank 0 alone)."""
    strategies = [BASELINE_STRATEGY, *strategies]
    where = where or (lambda _: nullcontext())
    kinds = prompt_kinds(prompt_kind)
    rows = []
    for length in lengths:
        prompts = [(kind, bench_prompt(tokenizer, kind, length)) for kind in kinds]
        for strategy in strategies:
            if on_run:
                on_run(f"{len(prompts[0][1].tokens)} tokens, warm-up {strategy.mode}")
            with where(strategy):
                run_once(model, tokenizer, prompts[0][1].tokens, 2, strategy.config)
        mine: list[dict] = []
        for kind, prompt in prompts:
            runs: dict[str, list[Run]] = {s.mode: [] for s in strategies}
            for repeat in range(repeats):
                for strategy in strategies:
                    if on_run:
                        which = f"{kind}, " if len(kinds) > 1 else ""
                        size, count = len(prompt.tokens), f"{repeat + 1}/{repeats}"
                        on_run(f"{which}{size} tokens, {strategy.mode}, run {count}")
                    with where(strategy):
                        run = run_once(model, tokenizer, prompt.tokens, gen_len, strategy.config)
                    runs[strategy.mode].append(run)
            baseline = runs[BASELINE_STRATEGY.mode]
            made = [_row(mode, done, baseline, prompt) for mode, done in runs.items()]
            mine += [row | {"prompt": kind} for row in made] if len(kinds) > 1 else made
        rows += mine + (_workload_rows(mine, length) if len(kinds) > 1 else [])
    return rows


def _workload_rows(rows: list[dict], length: int) -> list[dict]:
    """Per strategy over a length's prompts: the geometric mean of the TTFT ratios to stock's,
    the mean work share, and how many prompts pruned and kept stock's answer."""
    summary = []
    for mode in dict.fromkeys(row["mode"] for row in rows):
        mine = [row for row in rows if row["mode"] == mode]
        summary.append(
            {
                "mode": mode,
                "prompt": f"geometric mean of {len(mine)}",
                "length": length,
                "prompt_tokens": statistics.mean(row["prompt_tokens"] for row in mine),
                "speedup": statistics.geometric_mean(row["speedup"] for row in mine),
                "compute_fraction": statistics.mean(row["compute_fraction"] for row in mine),
                "pruned": f"{sum(bool(row['pruned']) for row in mine)} of {len(mine)}",
                "answer_matches_baseline": (
                    f"{sum(row['answer_matches_baseline'] for row in mine)} of {len(mine)}"
                ),
            }
        )
    return summary


def _mean_std(values: list[float]) -> tuple[float, float | None]:
    """The mean and, from two values on, the standard deviation (None: one value has none)."""
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else None


def _row(mode: str, runs: list[Run], baseline: list[Run], prompt: BenchPrompt) -> dict:
    ttft, ttft_std = _mean_std([r.ttft_s for r in runs])
    first = runs[0]
    right = prompt.right(first.text)
    return {
        "mode": mode,
        "prompt_tokens": first.prompt_tokens,
        "ttft_s": ttft,
        "ttft_std": ttft_std,
        "prompt_tps": statistics.mean(r.prompt_tps for r in runs),
        "generation_tps": statistics.mean(r.generation_tps for r in runs),
        "generation_tokens": len(first.tokens),
        "peak_memory_gb": max(r.peak_memory_gb for r in runs),
        "compute_fraction": first.compute_fraction,
        "pruned": first.pruned,
        "speedup": statistics.mean(r.ttft_s for r in baseline) / ttft,
        "answer_matches_baseline": all(r.tokens == baseline[0].tokens for r in runs),
        "answer_correct": right,
        "repeats": len(runs),
        "text": first.text,
    }


def run_header(model_name: str, strategies: list[Strategy], **settings) -> dict:
    """A measuring run's header (`header`), with what each of its strategies does."""
    presets = {s.mode: s.config.describe() if s.config else "stock mlx-lm" for s in strategies}
    return header(model_name, **settings) | {"presets": presets}


def pruning_presets(model_name: str) -> tuple[list[str], list[str]]:
    """The model's presets that prune, and those that run every prompt whole (stock's work, so
    timing one would time stock against itself): default, gentle, fast and any it ships or
    `lazymlx calibrate` saved for it."""
    names = ["default", "gentle", "fast", *shipped_presets(model_name), *saved_presets(model_name)]
    names = list(dict.fromkeys(names))
    pruning = [name for name in names if resolve_preset(name, model_name).prunes]
    return pruning, [name for name in names if name not in pruning]


def beside_the_chain(
    model: nn.Module, strategies: list[Strategy], ranks: int
) -> tuple[list[Strategy], Callable[[Strategy], AbstractContextManager] | None]:
    """On a context-parallel chain (ranks > 0) each strategy twice, on rank 0 alone and on the
    chain (its mode then says "on N ranks"), and `bench`'s `where` for them; else the
    strategies as they are, run where the caller runs."""
    from lazymlx.engine.cache import LazyState
    from lazymlx.parallel import context_parallel

    if not ranks:
        return strategies, None
    context_parallel.check_model(LazyState(model))  # refused before any run
    chained = [Strategy(f"{s.mode} on {ranks} ranks", s.config) for s in strategies]
    on_chain = {s.mode for s in chained}

    def where(strategy: Strategy) -> AbstractContextManager:
        return nullcontext() if strategy.mode in on_chain else context_parallel.alone()

    return [s for pair in zip(strategies, chained, strict=True) for s in pair], where


def against_one_process(rows: list[dict], ranks: int) -> list[dict]:
    """Each chain row with its ranks, its TTFT against one process's with the same strategy,
    and whether its answer is one process's; the other rows with 1 rank (no chain: as they
    are)."""
    if not ranks:
        return rows
    alone = {(row["prompt_tokens"], row["mode"]): row for row in rows}
    suffix = f" on {ranks} ranks"
    for row in rows:
        one = alone.get((row["prompt_tokens"], row["mode"].removesuffix(suffix)))
        chained = row["mode"].endswith(suffix)
        row["ranks"] = ranks if chained else 1
        row["vs_one_process"] = one["ttft_s"] / row["ttft_s"] if chained else None
        row["same_as_one_process"] = one["text"] == row["text"] if chained else None
    return rows
