"""What an eval and a calibration both start from: the model loaded, its cases made, and what
they keep beside the run (the references, the judge, the journal).

The model comes through a `Loader` (lazymlx.load unless the caller has its own, as the CLI
has, with a progress bar while a model converts): the references load it again, to
round-trip a copy's weights. Progress is reported through a `Progress`, which the CLI draws as a
bar and a Python caller may leave out (`quietly`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import mlx.nn as nn
from mlx_lm.tokenizer_utils import TokenizerWrapper

from lazymlx.errors import LazymlxError
from lazymlx.evals.baselines import BaselineCache
from lazymlx.evals.cases import Case, make_cases, parse_families, suite_counts
from lazymlx.evals.families import CHAT_FAMILIES
from lazymlx.evals.judge import Judge
from lazymlx.evals.records import BASELINE, Record, read_records, records_as_dicts
from lazymlx.evals.reference import REFERENCE_BITS, round_trip
from lazymlx.evals.runner import References, needs_run
from lazymlx.lengths import parse_lengths

Loader = Callable[[str], tuple[nn.Module, TokenizerWrapper]]
# given the work ahead (runs, or a search's expected seconds), a context whose callable is told
# each run as it starts ("passkey 1024 #0 lazy:fast")
Progress = Callable[[float], AbstractContextManager[Callable[[str], None]]]


@contextmanager
def quietly(total: float) -> Iterator[Callable[[str], None]]:
    """No progress shown: a Python caller's default."""
    yield lambda run: None


@dataclass
class Suite:
    """A run's model and its cases of a split, with the earlier records a resumed run keeps."""

    name: str  # the model as the caller named it
    model: nn.Module
    tokenizer: TokenizerWrapper
    cases: list[Case]
    counts: dict[int, int]  # cases per length
    earlier: list[Record]
    skipped: list[str]  # chat families a model without a chat template cannot run
    load: Loader

    def skipped_note(self, head: dict) -> dict:
        """The run's header, saying which families were left out and why."""
        if self.skipped:
            head["skipped"] = f"{', '.join(self.skipped)}: the model has no chat template"
        return head

    def references(self, cache: BaselineCache, modes: list[str] | None = None) -> References:
        """The references (lazymlx/evals/reference.py), by mode: the model loaded again with its
        weights round-tripped through 8 bits and through 4 bits (`modes`: only these), each
        with its answers' cache in the baselines' file."""
        made = {}
        for mode, bits in REFERENCE_BITS.items():
            if modes is None or mode in modes:
                other = round_trip(self.load(self.name)[0], bits)
                made[mode] = (other, BaselineCache(other, cache.path))
        return made

    def judge(self) -> Judge | None:
        """Stock's judgment of open answers, when the run has any (lazymlx/evals/judge.py)."""
        return Judge(self.model) if any(case.judge for case in self.cases) else None


def load_suite(
    name: str,
    families: str,
    split: str,
    lengths: str,
    cases: int | None,
    journal: str | None,
    resume: bool,
    load: Loader,
) -> Suite:
    """The model loaded and the split's cases of the families at the lengths (a base model: no
    chat families); a resumed run's earlier records from its journal."""
    if resume and not journal:
        raise LazymlxError("--resume needs --journal FILE: the journal of the run to go on with")
    names, sizes = parse_families(families), parse_lengths(lengths)
    counts = suite_counts(split, sizes, cases)
    earlier = read_records(journal)[1] if resume and Path(journal).exists() else []
    model, tokenizer = load(name)
    skipped = []
    if tokenizer.chat_template is None:  # a base model: no chat families
        skipped = [family for family in names if family in CHAT_FAMILIES]
        names = [family for family in names if family not in CHAT_FAMILIES]
    made = make_cases(tokenizer, names, split, counts)
    return Suite(name, model, tokenizer, made, counts, earlier, skipped, load)


def uncached(cache: BaselineCache, cases: list[Case], mode: str = BASELINE) -> int:
    """How many of the cases' answers under `mode` (stock, or a reference) must run: the cache
    lacks them or they are stale (`needs_run`). The cache's counts then start over."""
    runs = sum(needs_run(c, cache.get(c), mode) for c in cases)
    cache.hits = cache.misses = 0
    return runs


def journal_writer(journal: str | None) -> Callable[[Record], None]:
    """A runner's on_record: each record appended to the journal as a JSON line (none: kept
    nowhere)."""

    def keep(record: Record) -> None:
        if journal:
            with open(journal, "a") as log:
                log.write(json.dumps(records_as_dicts([record])[0]) + "\n")

    return keep


def announce(advance: Callable[[str], None]) -> Callable[[Case, str], None]:
    """A runner's on_run for a progress callable: the case and mode about to run."""
    return lambda case, mode: advance(f"{case.family} {case.length} #{case.seed} {mode}")
