"""The full model as a judge: stock's mean per-token negative log-likelihood of an answer.

Words against stock's one greedy text rank a garbled answer that reuses stock's words above a
sound paraphrase; the full model's own likelihood of each answer, on the same prompt, tells
them apart (benchmarks/README.md, "The judge"). An answer's score is the mean over its tokens
of -log p(token | prompt, the answer's tokens before it) under stock's weights: lower is
better, and stock's own greedy answer sits near the least any answer gets.

The prompt is prefilled once per case (its KV cache kept on disk beside the scores), and each
answer is scored on a copy of that cache, so judging a case's every answer costs one prefill
and a short forward pass each (the cache holds all but the prompt's last token, which is fed
with the answer, so no logits need keeping). Scores are cached on disk by model, prompt and answer.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import load_prompt_cache, make_prompt_cache, save_prompt_cache

from lazymlx.engine.atomic import write_atomic
from lazymlx.engine.prefill import PREFILL_CHUNK
from lazymlx.errors import LazymlxError
from lazymlx.evals.baselines import fingerprint
from lazymlx.platform import backend


def user_dir() -> Path:
    from lazymlx.models.registry import models_dir

    return models_dir() / "judge"


def mean_nll(logits: mx.array, answer: list[int]) -> float:
    """The mean negative log-likelihood of `answer` under `logits` (one row per answer token,
    row i predicting answer[i])."""
    logprobs = nn.log_softmax(logits.astype(mx.float32), axis=-1)
    picked = mx.take_along_axis(logprobs, mx.array(answer)[:, None], axis=-1)
    return -mx.mean(picked).item()


class Judge:
    """Stock's judgment of answers, from `model` (stock's weights); prompt caches and scores in
    `folder` (the user's cache unless given). One prompt's cache is held in memory at a time:
    a case's answers are judged one after another."""

    def __init__(self, model: nn.Module, folder: Path | None = None) -> None:
        self.model = model
        self.model_key = fingerprint(model)
        self.folder = folder or user_dir()
        self.scores_file = self.folder / "scores.json"
        self.scores: dict[str, float] = self._read()
        self.held: tuple[str, list[Any]] | None = None  # a prompt's key and its KV cache

    def _read(self) -> dict[str, float]:
        if not self.scores_file.exists():
            return {}
        try:
            return json.loads(self.scores_file.read_text())["scores"]
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise LazymlxError(
                f"cannot read the judge's scores {self.scores_file} ({error}); delete that file"
            ) from error

    def _key(self, *parts: object) -> str:
        what = json.dumps([self.model_key, backend(), *parts])
        return hashlib.sha256(what.encode()).hexdigest()

    def nll(self, prompt: list[int], answer: list[int]) -> float | None:
        """Stock's mean per-token NLL of `answer` after `prompt` (None for an empty answer)."""
        if not answer:
            return None
        key = self._key(prompt, answer)
        if key not in self.scores:
            self.scores[key] = self._score(prompt, answer)
            self._write()
        return self.scores[key]

    def _score(self, prompt: list[int], answer: list[int]) -> float:
        """The prompt's last token and the answer's but last, fed over a copy of the cache of
        the rest of the prompt: row i of the logits predicts answer[i]."""
        if len(prompt) < 2:
            raise LazymlxError("the judge scores an answer after a prompt of 2 tokens or more")
        scratch = copy.deepcopy(self._prefilled(prompt[:-1]))  # kept for the next answer
        fed = mx.array(prompt[-1:] + answer[:-1])[None]
        return mean_nll(self.model(fed, cache=scratch)[0], answer)

    def _prefilled(self, tokens: list[int]) -> list[Any]:
        """The KV cache of `tokens`: held, saved, or computed (in mlx-lm's prefill chunks) and
        saved."""
        key = self._key(tokens)
        if self.held is not None and self.held[0] == key:
            return self.held[1]
        path = self.folder / f"{key}.safetensors"
        if path.exists():
            cache = load_prompt_cache(str(path))
        else:
            cache = make_prompt_cache(self.model)
            ids = mx.array(tokens)
            for start in range(0, len(tokens), PREFILL_CHUNK):
                logits = self.model(ids[None, start : start + PREFILL_CHUNK], cache=cache)
                mx.eval(logits, [c.keys for c in cache], [c.values for c in cache])
            write_atomic(
                path, lambda staged: save_prompt_cache(str(staged), cache), suffix=".safetensors"
            )
        self.held = (key, cache)
        return cache

    def _write(self) -> None:
        """The scores file as it is now (another run may have added some) with ours, atomically."""
        self.folder.mkdir(parents=True, exist_ok=True)
        merged = (self._read() if self.scores_file.exists() else {}) | self.scores
        data = json.dumps({"format": 1, "scores": merged}, indent=0, sort_keys=True)
        write_atomic(self.scores_file, lambda staged: staged.write_text(data))
