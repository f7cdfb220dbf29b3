"""Baseline outcomes cached on disk, so evaluating a preset costs only its own side.

An entry is keyed by the model (a fingerprint of its weights, so a requantized or retrained model
with the same name misses), the backend it ran on, and everything that shapes the answer: the
case's kind, its exact text, and the generation settings (greedy, the token count). Any change
misses, and a missed baseline is run and stored, in the user's cache beside the converted
models or a file of the caller's (`--baselines`: the shelf's are benchmarks/baselines/NAME.json,
so its runs never re-run stock mlx-lm on the suite's cases). Writes are atomic: an interrupted
run keeps every baseline it finished.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, replace
from datetime import date
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from lazymlx.engine.atomic import write_atomic
from lazymlx.errors import LazymlxError
from lazymlx.evals.cases import Case
from lazymlx.evals.outcome import Outcome
from lazymlx.platform import backend

SETTINGS = {"sampling": "greedy", "engine": "stock mlx-lm"}


def user_cache() -> Path:
    from lazymlx.models.registry import models_dir

    return models_dir() / "baselines.json"


def fingerprint(model: nn.Module) -> str:
    """A hash of the model's weights: names, shapes, dtypes and two sums of every tensor."""
    digest = hashlib.sha256()
    for name, value in sorted(tree_flatten(model.parameters()), key=lambda item: item[0]):
        as_float = value.astype(mx.float32)
        total, size = mx.sum(as_float).item(), mx.sum(mx.abs(as_float)).item()
        digest.update(f"{name}:{value.shape}:{value.dtype}:{total:.6e}:{size:.6e};".encode())
    return digest.hexdigest()


def _read(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text())["entries"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise LazymlxError(
            f"cannot read the baseline cache {path} ({error}); fix or delete that file"
        ) from error


class BaselineCache:
    """Baseline outcomes of one model, looked up in and written to `path` (the user's cache
    unless given)."""

    def __init__(self, model: nn.Module, path: Path | None = None) -> None:
        self.model_key = fingerprint(model)
        self.path = path or user_cache()
        self.own = _read(self.path)  # what the cache file holds (rewritten whole on each put)
        self.entries = dict(self.own)
        self.ran_here: set[str] = set()  # keys this run put: their TTFT is this run's
        self.hits = self.misses = 0

    def key(self, case: Case) -> str:
        what = {
            "model": self.model_key,
            "backend": backend(),
            "kind": case.kind,
            "segments": case.segments,
            "max_tokens": case.max_tokens,
        } | SETTINGS
        return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()

    def get(self, case: Case) -> Outcome | None:
        entry = self.entries.get(self.key(case))
        if entry is None:
            self.misses += 1
            return None
        self.hits += 1
        return Outcome(**entry["outcome"])

    def timed_here(self, case: Case) -> bool:
        """Whether this run (this cache object) ran the case's baseline, so its TTFT can stand
        beside a preset's."""
        return self.key(case) in self.ran_here

    def put(self, case: Case, outcome: Outcome) -> None:
        """Store an outcome; its prompt's tokens only for an open case (the judge reads them)."""
        import mlx_lm

        kept = outcome if case.judge is not None else replace(outcome, context=None)
        entry = {
            "case": f"{case.family} {case.split} {case.length} #{case.seed}",
            "outcome": asdict(kept),
            "mlx": mx.__version__,
            "mlx_lm": mlx_lm.__version__,
            "date": date.today().isoformat(),
        }
        key = self.key(case)
        self.entries[key] = entry
        self.ran_here.add(key)
        self._write(key, entry)

    def _write(self, key: str, entry: dict[str, Any]) -> None:
        """Add one entry to the file as it is now (another run may have added some since)."""
        self.own = _read(self.path) | self.own | {key: entry}
        data = json.dumps({"format": 1, "entries": self.own}, indent=0, sort_keys=True)
        write_atomic(self.path, lambda staged: staged.write_text(data))
