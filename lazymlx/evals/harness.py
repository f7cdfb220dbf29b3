"""A lazymlx model as lm-evaluation-harness sees it: mlx-lm's own harness model (`MLXLM`,
`mlx_lm.evaluate`) with lazymlx's generation and prompt step under it.

mlx-lm's class already does what the harness asks of stock (its tokenizing, chat template,
scoring helpers and rolling log-likelihood are kept); this one changes what a preset changes:
- `generate_until` runs `lazymlx.generation.stream_generate` with the preset (None: stock
  mlx-lm), one request at a time, as a user's `generate` does, cut at the task's stop strings;
- `loglikelihood` under a preset runs the context through the pruned prompt step (mlx-lm's
  prefill chunks into `LazyModel`, as generation does), then feeds the continuation one decode
  step at a time over what the step left, so each continuation token is scored as decoding
  would see it: the logits a pruned answer would have been sampled from. Several continuations
  of one context share its prompt step (each on a copy of the context).
Each request's work share (LazyStats.work_share: the prompt step's (token, layer) work against
stock's) is kept beside its answer, and both go to a cache file when one is given, so an
interrupted run resumes where it stopped (lm-eval's own CachingLM keeps answers only).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from lm_eval.api.model import hash_args
from mlx_lm.evaluate import MLXLM
from mlx_lm.tokenizer_utils import TokenizerWrapper

from lazymlx.engine.cache import LazyAux, LazyKVCache, LazyState
from lazymlx.engine.config import LazyConfig
from lazymlx.engine.model import LazyModel
from lazymlx.engine.prefill import PREFILL_CHUNK
from lazymlx.errors import LazymlxError
from lazymlx.generation import (
    GENERATION_LOCK,
    LazyStats,
    check_context,
    lazy_model,
    stream_generate,
)

DEFAULT_GEN_TOKENS = 256  # a task that names no max_gen_toks (lm-eval's own default)
Tick = Callable[[str], None]  # told each request as it starts


def fork(state: LazyState, model: nn.Module) -> LazyState:
    """A copy of a lazy context that the next steps can change without touching `state`: each
    entry rebuilt from its saved `state` (MLX arrays are values, so nothing is shared that a
    step would write through)."""
    entries: list[Any] = []
    for entry in state:
        copy = LazyAux() if isinstance(entry, LazyAux) else LazyKVCache()
        copy.state = entry.state
        entries.append(copy)
    return LazyState(model, entries)


class LazyLM(MLXLM):
    """`mlx_lm.evaluate.MLXLM` over an already-loaded lazymlx model, under one preset (`config`;
    None: stock mlx-lm). `shares` collects each request's work share by task (stock's: none),
    `cache_file` (a sqlite file; None: no cache) keeps every answer and share as it comes, keyed
    as lm-eval's CachingLM keys them (its hash of the method and the request's arguments)."""

    def __init__(
        self,
        model: nn.Module,
        tokenizer: TokenizerWrapper,
        config: LazyConfig | None,
        use_chat_template: bool | None = None,
        max_tokens: int | None = None,
        cache_file: Path | None = None,
        tick: Tick = lambda request: None,
    ) -> None:
        super(MLXLM, self).__init__()  # lm-eval's LM; MLXLM's own would load the model again
        # MLXLM's private attributes, as its __init__ sets them (engine/mlx_lm_private.py)
        self._model, self.tokenizer, self.config = model, tokenizer, config
        self._max_tokens, self._batch_size, self._sampler = max_tokens, 1, None
        if use_chat_template is None:
            use_chat_template = tokenizer.chat_template is not None
        self.use_chat_template = use_chat_template
        self.shares: dict[str, list[float]] = {}
        self.tick = tick
        self.cache = _open_cache(cache_file)

    def _cached(self, method: str, request) -> tuple[Any, float | None] | None:
        if self.cache is None:
            return None
        found = self.cache.get(hash_args(method, request.args))
        return None if found is None else (found["result"], found["work_share"])

    def _share(self, request, share: float | None) -> None:
        if share is not None:
            self.shares.setdefault(request.task_name, []).append(share)

    def _keep(self, method: str, request, result: Any, share: float | None) -> None:
        self._share(request, share)
        if self.cache is not None:
            key = hash_args(method, request.args)
            self.cache[key] = {"result": result, "work_share": share}
            self.cache.commit()

    def generate_until(self, requests) -> list[str]:
        """Each request through lazymlx's stream_generate, greedy unless the task samples,
        stopped at the first of its stop strings (cut there, as mlx-lm's harness model cuts)."""
        answers = []
        for request in requests:
            cached = self._cached("generate_until", request)
            if cached is None:
                self.tick(f"generate {len(answers) + 1}/{len(requests)}")
                text, share = self._generate(*request.args)
                self._keep("generate_until", request, text, share)
            else:
                text, share = cached
                self._share(request, share)
            answers.append(text)
        return answers

    def _generate(self, context: str, options: dict) -> tuple[str, float | None]:
        until = options.get("until") or []
        until = [until] if isinstance(until, str) else list(until)
        limit = self._max_tokens or options.get("max_gen_toks", DEFAULT_GEN_TOKENS)
        temp = float(options.get("temperature", 0.0)) if options.get("do_sample") else 0.0
        tokens = self.tokenizer.encode(context, add_special_tokens=not self.use_chat_template)
        pieces, last = [], None
        for last in stream_generate(
            self._model, self.tokenizer, tokens, limit, lazy=self.config, temp=temp
        ):
            pieces.append(last.text)
            if until and any(stop in "".join(pieces) for stop in until):
                break
        text = _cut_at_first("".join(pieces), until)
        if getattr(self.tokenizer, "has_thinking", False):
            text = _after(text, self.tokenizer.think_end)
        share = last.lazy.work_share if last is not None and last.lazy is not None else None
        return text, share

    def loglikelihood(self, requests) -> list[tuple[float, bool]]:
        """(log-probability, greedy) of each continuation after its context: stock's by
        mlx-lm's own scoring, a preset's through the pruned prompt step and decode steps.
        Requests sharing a context share its prompt step."""
        results: list[tuple[float, bool] | None] = [None] * len(requests)
        groups: dict[str, list[int]] = {}
        for index, request in enumerate(requests):
            cached = self._cached("loglikelihood", request)
            if cached is None:
                groups.setdefault(request.args[0], []).append(index)
            else:
                results[index] = tuple(cached[0])
                self._share(request, cached[1])
        for done, (context, indices) in enumerate(groups.items()):
            self.tick(f"score {done + 1}/{len(groups)}")
            continuations = [requests[i].args[1] for i in indices]
            scored, share = self._score(context, continuations)
            for index, result in zip(indices, scored, strict=True):
                results[index] = result
                self._keep("loglikelihood", requests[index], list(result), share)
        return results

    def _score(self, context: str, continuations: list[str]) -> tuple[list, float | None]:
        """Each continuation's (log-probability, greedy) after `context`, and the work share of
        the context's prompt step (None: stock)."""
        prefix = list(self._tokenize([context])[0])
        whole = self._tokenize([context + c for c in continuations])
        tails = [list(tokens[len(prefix) :]) for tokens in whole]
        if not prefix or not all(tails):
            raise LazymlxError(
                "a loglikelihood request needs a context and a continuation of one token or "
                "more; this task sent an empty one"
            )
        check_context(self._model, len(prefix) + max(map(len, tails)))
        with GENERATION_LOCK:
            if self.config is None:
                logprobs, cache = self._process_prompt(prefix)
                return [self._stock_score(logprobs, cache, tail) for tail in tails], None
            return self._lazy_scores(prefix, tails)

    def _stock_score(self, logprobs: mx.array, cache: list, tail: list[int]) -> tuple[float, bool]:
        """mlx-lm's harness scoring: the prompt's last-token log-probs, then the rest of the
        continuation in one forward pass over a copy of its cache."""
        score = logprobs[0, tail[0]].item()
        greedy = mx.argmax(logprobs).item() == tail[0]
        if len(tail) > 1:
            inputs = mx.array(tail)[None, :]
            scores, _, is_greedy = self._score_fn(inputs, cache=copy.deepcopy(cache))
            score += mx.sum(scores).item()
            greedy = greedy and bool(mx.all(is_greedy).item())
        return score, bool(greedy)

    def _lazy_scores(self, prefix: list[int], tails: list[list[int]]) -> tuple[list, float]:
        """The context's pruned prompt step, fed in mlx-lm's prefill chunks to the wrapped
        model as generate_step feeds it; then each continuation over its own copy of the
        context, one decode step a token."""
        tokens = mx.array(prefix, dtype=mx.uint32)
        options: dict[str, Any] = {}
        wrapped, _ = lazy_model(
            self._model, self.tokenizer, tokens, max(map(len, tails)), self.config, options
        )
        state = options["prompt_cache"]
        logits = None
        for start in range(0, len(prefix) - 1, PREFILL_CHUNK):
            end = min(start + PREFILL_CHUNK, len(prefix) - 1)
            wrapped(tokens[None, start:end])
            mx.eval([c.state for c in state])
        logits = wrapped(tokens[None, -1:])[:, -1, :]
        share = LazyStats.of(state, wrapped.counts, len(prefix)).work_share
        scored = []
        for i, tail in enumerate(tails):
            context = state if i == len(tails) - 1 else fork(state, self._model)
            scored.append(self._decode_score(logits, context, tail))
        return scored, share

    def _decode_score(
        self, first: mx.array, state: LazyState, tail: list[int]
    ) -> tuple[float, bool]:
        """A continuation's log-probability and greediness: its first token from the prompt
        step's logits, each next one from a decode step fed the one before, as decoding runs
        over the pruned context (the preset's decode policy, its revival included)."""
        decoder = LazyModel(self._model, state, self.config, 0, PREFILL_CHUNK)
        logits, score, greedy = first, 0.0, True
        for position, token in enumerate(tail):
            logprobs = nn.log_softmax(logits.astype(mx.float32), axis=-1)
            score += logprobs[0, token].item()
            greedy = greedy and mx.argmax(logprobs, axis=-1).item() == token
            if position + 1 < len(tail):
                logits = decoder(mx.array([[token]], dtype=mx.uint32))[:, -1, :]
        return score, bool(greedy)

    def loglikelihood_rolling(self, requests) -> list[float]:
        """A text's whole log-likelihood (perplexity tasks): stock's only. Every token of the
        text is scored, so there is no prompt to prune before an answer."""
        if self.config is not None:
            raise LazymlxError(
                "perplexity tasks (loglikelihood_rolling) score every token of a text, so no "
                "prompt step is pruned before an answer; run them with --lazy off"
            )
        return super().loglikelihood_rolling(requests)


def _cut_at_first(text: str, stops: list[str]) -> str:
    """The text before the first of the stop strings found in it (all of it where none is)."""
    found = [at for at in (text.find(stop) for stop in stops) if at >= 0]
    return text[: min(found, default=len(text))]


def _after(text: str, marker: str) -> str:
    """The text after the first `marker` (a thinking model's end of thought), else all of it."""
    at = text.find(marker)
    return text if at == -1 else text[at + len(marker) :]


def _open_cache(path: Path | None):
    """The sqlite file answers are kept in (sqlitedict, which lm-eval itself uses)."""
    if path is None:
        return None
    from sqlitedict import SqliteDict

    path.parent.mkdir(parents=True, exist_ok=True)
    return SqliteDict(str(path), autocommit=False)
