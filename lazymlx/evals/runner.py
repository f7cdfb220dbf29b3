"""Runs cases the way users' text reaches the model, and compares each strategy with the baseline.

Every kind of case goes through the public path a user takes: `stream_generate` for a raw
prompt; a `Context` run over two turns for a follow-up (lazymlx/turn.py, as `generate` continues a
conversation); a context file saved, loaded and continued (`--prompt-cache-file`); `LLM`'s prefix
reuse (the server's path); `ChatSession` for chats. The baseline (stock mlx-lm with its KV cache)
runs the same path with lazy=None, and its outcome is cached on disk (baselines.py), so a preset
costs only its own side.

Multi-turn cases (follow-ups, kept documents, chats) have idle time between their turns, where
the app completes the pruned context (lazymlx/engine/complete.py): a preset that completes runs them
twice, after completion (its own mode, timed apart) and with no idle time (" no-idle").
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import mlx.nn as nn
from mlx_lm.tokenizer_utils import TokenizerWrapper
from mlx_lm.utils import common_prefix_len

from lazymlx.contexts import Context, load_context, new_cache, save_context
from lazymlx.engine.complete import complete_all
from lazymlx.engine.config import LazyConfig
from lazymlx.engine.presets import STOCK
from lazymlx.errors import LazymlxError
from lazymlx.evals.baselines import BaselineCache
from lazymlx.evals.cases import FIRST_ANSWER, FIRST_REPLY, Case
from lazymlx.evals.judge import Judge
from lazymlx.evals.outcome import Outcome
from lazymlx.evals.records import BASELINE, NO_IDLE, Record, RecordKey, case_key
from lazymlx.evals.reference import REFERENCE_BITS
from lazymlx.evals.scoring import loops
from lazymlx.evals.strategies import Strategy
from lazymlx.generation import Response, encode_prompt, stream_generate
from lazymlx.turn import run_turn

if TYPE_CHECKING:
    from lazymlx.session import ChatSession


MULTI_TURN = ("followup", "kept-file", "kept-llm", "chat")


def completes(lazy: LazyConfig | None) -> bool:
    return lazy is not None and lazy.prunes and lazy.complete != "never"


def _collect(
    responses: Iterable[Response],
    first_ttft_s: float = 0.0,
    completion_s: float = 0.0,
    context: Callable[[], list[int]] | None = None,
) -> Outcome:
    tokens, pieces, last = [], [], None
    for last in responses:
        tokens.append(last.token)
        pieces.append(last.text)
    lazy = last.lazy
    return Outcome(
        text="".join(pieces),
        tokens=tokens,
        prompt_tokens=last.prompt_tokens,
        ttft_s=last.ttft_s,
        compute_fraction=lazy.work_share if lazy else 1.0,
        step_fraction=lazy.step_share if lazy else 1.0,
        generation_tps=last.generation_tps if last.generation_tokens > 1 else 0.0,
        peak_memory_gb=last.peak_memory,
        first_ttft_s=first_ttft_s,
        completion_s=completion_s,
        context=None if context is None else context(),
    )


def _timed(work: Callable[[], object]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def run_case(
    model: nn.Module, tokenizer: TokenizerWrapper, case: Case, lazy: LazyConfig | None
) -> Outcome:
    """One case through the path its kind stands for; greedy; the scored step's outcome. A
    preset that completes (`completes`) completes the context before the scored step, as idle
    time between turns would, timed apart; one with complete="never" goes straight on."""
    if case.kind == "raw":
        first = encode_prompt(tokenizer, case.segments[0]).tolist()
        responses = stream_generate(model, tokenizer, first, case.max_tokens, lazy=lazy)
        return _collect(responses, context=lambda: first)
    if case.kind == "chat":
        return _run_chat(model, tokenizer, case, lazy)
    if case.kind == "kept-llm":
        return _run_kept_llm(model, tokenizer, case, lazy)
    return _run_followup(model, tokenizer, case, lazy)


def _two_prompts(tokenizer: TokenizerWrapper, case: Case) -> tuple[list[int], list[int]]:
    """A two-prompt case's tokens: the first prompt's (a document), and what the second adds."""
    first = encode_prompt(tokenizer, case.segments[0]).tolist()
    return first, tokenizer.encode(case.segments[1], add_special_tokens=False)


def _run_chat(
    model: nn.Module, tokenizer: TokenizerWrapper, case: Case, lazy: LazyConfig | None
) -> Outcome:
    """A chat case through `ChatSession`: its messages in turn, the last one scored."""
    from lazymlx.session import ChatSession

    session = ChatSession(model, tokenizer, lazy=lazy)
    last, first_ttft = len(case.segments) - 1, 0.0
    for turn in range(last):
        for response in send_turn(session, case, turn):
            first_ttft = first_ttft or response.ttft_s
    spent = _timed(session.complete) if completes(lazy) else 0.0
    asked = lambda: session.context.asked()  # noqa: E731 (the context a turn may replace)
    return _collect(send_turn(session, case, last), first_ttft, spent, asked)


def _run_kept_llm(
    model: nn.Module, tokenizer: TokenizerWrapper, case: Case, lazy: LazyConfig | None
) -> Outcome:
    """A document kept by `LLM` (the server's path): one token answered over it, then the
    question that goes on from it, over the kept context."""
    from lazymlx.llm import LLM

    first, then = _two_prompts(tokenizer, case)
    llm = LLM(lambda: (model, tokenizer), lazy=lazy, idle=False)  # completion timed here
    try:
        document = llm.submit(first, max_tokens=1)
        document.result()
        spent = _timed(llm.complete) if completes(lazy) else 0.0
        stream = llm.submit(first + then, max_tokens=case.max_tokens)
        return _collect(stream, document.last.ttft_s, spent, lambda: first + then)
    finally:
        llm.close()


def _run_followup(
    model: nn.Module, tokenizer: TokenizerWrapper, case: Case, lazy: LazyConfig | None
) -> Outcome:
    """A follow-up over one context (as `generate` continues a conversation) or, for a
    kept-file case, over a context file saved, loaded and continued (--prompt-cache-file)."""
    first, then = _two_prompts(tokenizer, case)
    context = Context(new_cache(model, lazy))
    answer_tokens = FIRST_ANSWER if case.kind == "followup" else 1
    first_ttft = 0.0
    for response in run_turn(model, tokenizer, context, first, max_tokens=answer_tokens, lazy=lazy):
        first_ttft = first_ttft or response.ttft_s
    idle = completes(lazy)
    spent = _timed(lambda: complete_all(context.cache, lazy)) if idle else 0.0
    if case.kind == "kept-file":
        context = _saved_and_loaded(context, model, lazy, whole=idle)
    turn = run_turn(
        model, tokenizer, context, context.tokens + then, max_tokens=case.max_tokens, lazy=lazy
    )
    return _collect(turn, first_ttft, spent, context.asked)


def _saved_and_loaded(
    context: Context, model: nn.Module, lazy: LazyConfig | None, whole: bool
) -> Context:
    """The context after a round trip through a context file (completed first if `whole`)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "context.safetensors"
        preset = STOCK if lazy is None else "eval"
        save_context(path, context, "eval-model", preset, complete=whole)
        return load_context(path, model, "eval-model", lazy)[0]


def send_turn(session: ChatSession, case: Case, turn: int) -> Iterator[Response]:
    """A chat case's message `turn` sent as the eval sends it: the replies before the scored
    (last) one are cut at FIRST_REPLY tokens, the scored one at the case's max_tokens."""
    last = turn == len(case.segments) - 1
    session.generation["max_tokens"] = case.max_tokens if last else FIRST_REPLY
    return session.send(case.segments[turn])


def _record(
    case: Case,
    mode: str,
    outcome: Outcome,
    baseline: Outcome,
    fresh: bool,
    judge: Judge | None = None,
) -> Record:
    """The record of `outcome` beside stock's (`baseline`); an open answer judged by stock on
    stock's prompt where a judge is given."""
    judged = judge is not None and case.judge is not None and baseline.context is not None
    return Record(
        family=case.family,
        split=case.split,
        length=case.length,
        seed=case.seed,
        kind=case.kind,
        source=case.source,
        depth=case.depth,
        mode=mode,
        prompt_tokens=outcome.prompt_tokens,
        correct=case.correct(outcome.text),
        baseline_correct=case.correct(baseline.text),
        agreed_tokens=common_prefix_len(outcome.tokens, baseline.tokens),
        identical=outcome.tokens == baseline.tokens,
        ttft_s=outcome.ttft_s,
        baseline_ttft_s=baseline.ttft_s if fresh else None,
        compute_fraction=outcome.compute_fraction,
        step_fraction=outcome.step_fraction,
        generation_tps=outcome.generation_tps,
        peak_memory_gb=outcome.peak_memory_gb,
        text=outcome.text,
        tokens=outcome.tokens,
        first_ttft_s=outcome.first_ttft_s,
        completion_s=outcome.completion_s,
        score=case.similarity(outcome.text, baseline.text),
        target_score=None if case.target is None else case.similarity(outcome.text, case.target),
        looped=loops(outcome.text),
        nll=judge.nll(baseline.context, outcome.tokens) if judged else None,
    )


References = dict[str, tuple[nn.Module, BaselineCache]]  # mode → its model and answers' cache


def evaluate(
    model: nn.Module,
    tokenizer: TokenizerWrapper,
    cases: list[Case],
    strategies: list[Strategy],
    baselines: BaselineCache,
    on_run: Callable[[Case, str], None] | None = None,
    on_record: Callable[[Record], None] | None = None,
    recorded: Mapping[RecordKey, Record] | None = None,
    references: References | None = None,
    judge: Judge | None = None,
) -> list[Record]:
    """The baseline (from the cache, or run and cached) and each strategy on every case.

    A TTFT speedup is a ratio within one run: where the baseline ran in another run (the cache's,
    maybe another machine) its TTFT is not used (baseline_ttft_s None); one this run ran
    (`right_cases` runs them first) is. Records already in
    `recorded` (an interrupted run's journal) are returned as they are, not run or reported again.
    references: the 8-bit and 4-bit references' models and caches (lazymlx/evals/reference.py),
    each run as stock on every case beside the baseline (under its mode); judge: stock's
    judgment of every open answer (lazymlx/evals/judge.py).
    """
    recorded, references = recorded or {}, references or {}
    records = []
    for case in cases:
        runs = case_strategies(case, strategies)
        modes = [BASELINE, *references, *(s.mode for s in runs)]
        records += [r for mode in modes if (r := recorded.get(case_key(case, mode))) is not None]
        if all(case_key(case, mode) in recorded for mode in modes):
            continue
        todo = [s for s in runs if case_key(case, s.mode) not in recorded]
        baseline, fresh = baseline_outcome(model, tokenizer, case, baselines, on_run)
        mine = []
        if case_key(case, BASELINE) not in recorded:
            mine.append(_record(case, BASELINE, baseline, baseline, fresh, judge))
        for mode, (other, cache) in references.items():
            if case_key(case, mode) not in recorded:
                theirs, _ = baseline_outcome(other, tokenizer, case, cache, on_run, mode)
                mine.append(_record(case, mode, theirs, baseline, fresh, judge))
        for strategy in todo:
            if on_run:
                on_run(case, strategy.mode)
            outcome = run_case(model, tokenizer, case, strategy.config)
            mine.append(_record(case, strategy.mode, outcome, baseline, fresh, judge))
        for record in mine:
            if on_record:
                on_record(record)
        records += mine
    return records


def run_mode(
    model: nn.Module,
    tokenizer: TokenizerWrapper,
    case: Case,
    strategy: Strategy,
    baselines: BaselineCache,
    references: References | None = None,
    judge: Judge | None = None,
) -> Record:
    """One case under one mode, as calibration's search asks for them one at a time: stock
    (the baseline, cached), a reference (cached in its own entries) or a candidate beside
    stock's outcome, which is run first if the cache lacks it."""
    baseline, fresh = baseline_outcome(model, tokenizer, case, baselines, None)
    if strategy.mode == BASELINE:
        return _record(case, BASELINE, baseline, baseline, fresh, judge)
    if strategy.mode in REFERENCE_BITS:
        if strategy.mode not in (references or {}):
            raise LazymlxError(
                f"the {strategy.mode} runs only with its model (reference.round_trip)"
            )
        other, cache = references[strategy.mode]
        theirs, _ = baseline_outcome(other, tokenizer, case, cache, None, strategy.mode)
        return _record(case, strategy.mode, theirs, baseline, fresh, judge)
    outcome = run_case(model, tokenizer, case, strategy.config)
    return _record(case, strategy.mode, outcome, baseline, fresh, judge)


def case_strategies(case: Case, strategies: list[Strategy]) -> list[Strategy]:
    """The strategies a case runs: a multi-turn case runs each completing preset twice, after
    completion (its own mode) and with no idle time (mode + NO_IDLE). A chat of one message has
    no turn before it to complete."""
    if case.kind not in MULTI_TURN or (case.kind == "chat" and len(case.segments) == 1):
        return strategies
    runs: list[Strategy] = []
    for s in strategies:
        runs.append(s)
        straight = replace(s.config, complete="never") if completes(s.config) else None
        if straight is not None and all(r.config != straight for r in runs):  # one per config
            runs.append(Strategy(s.mode + NO_IDLE, straight))
    return runs


def right_cases(
    model: nn.Module,
    tokenizer: TokenizerWrapper,
    cases: list[Case],
    baselines: BaselineCache,
    on_run: Callable[[Case, str], None] | None = None,
) -> list[Case]:
    """The cases a preset can lose: those the baseline answers right, and the open-ended ones
    (judged, not right or wrong); free-form cases are left out. A baseline not cached runs first
    and is cached."""
    return [
        case
        for case in cases
        if case.judge is not None
        or case.correct(baseline_outcome(model, tokenizer, case, baselines, on_run)[0].text)
    ]


def needs_run(case: Case, cached: Outcome | None, mode: str = BASELINE) -> bool:
    """Whether a case's baseline must run: the cache lacks it, or it is stock's answer to an
    open case cached without the prompt the judge reads."""
    return cached is None or (mode == BASELINE and case.judge is not None and not cached.context)


def baseline_outcome(
    model: nn.Module,
    tokenizer: TokenizerWrapper,
    case: Case,
    baselines: BaselineCache,
    on_run: Callable[[Case, str], None] | None,
    mode: str = BASELINE,
) -> tuple[Outcome, bool]:
    """The case's baseline outcome (stock on this model: the baseline, or on a reference's
    weights) and whether this run ran it: from the cache, else run and cached. Stock's answer
    to an open case is run again where the cache lacks its prompt, which the judge reads."""
    outcome = baselines.get(case)
    if not needs_run(case, outcome, mode):
        return outcome, baselines.timed_here(case)
    if on_run:
        on_run(case, mode)
    outcome = run_case(model, tokenizer, case, None)
    baselines.put(case, outcome)
    return outcome, True
