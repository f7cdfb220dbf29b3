"""A case before it is sized: the haystack's units, what is planted where, and how the text is
framed into the segments a case feeds the model (lazymlx/evals/cases.py sizes it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

# Open-ended answers are this long: long enough to show a loop.
OPEN_TOKENS = 64
# "ask": a question through the chat template where the model has one, else a raw prompt that
# ends with this lead (a base model answers what follows "Answer:").
ASK_LEAD = "\nAnswer:"


def raw_frame(head: str, question: str) -> Callable[[str], tuple[str, ...]]:
    """One raw prompt: a head, the haystack's text, the question leading into the answer."""
    return lambda text: (head + text + question,)


class TextRanOut(Exception):
    """A family's documents have fewer units than asked for."""


Units = Callable[[int], list[str]]


@dataclass
class Draft:
    """A case before sizing: a haystack of n units with pieces inserted at depths, then framed."""

    units: Units
    inserts: list[tuple[float, str]]
    frame: Callable[[str], tuple[str, ...]]  # the haystack's text → the segments
    gold: str | None
    max_tokens: int
    depth: float
    source: str
    kind: str = "raw"
    joiner: str = " "
    values: list[str] = field(default_factory=list)  # the numbers planted (never in the haystack)
    place: Callable[[list[str], float], int] | None = None  # where an insert goes (code: lines)
    judge: str | None = None
    next_line: bool = False  # code completion: the unit after the text is the target
    reference: str | None = None  # an open answer's gold text, fixed (a module's docstring)
    aliases: tuple[str, ...] = ()  # other right answers
    once: tuple[str, ...] = ()  # texts the haystack must hold exactly once (what a question names)

    def target(self, n: int) -> str | None:
        """The gold text of an open answer: the first non-blank unit after the first n (the line
        a completion should write), or the fixed one."""
        if not self.next_line:
            return self.reference
        return next((u.strip() for u in self.units(n + 64)[n:] if u.strip()), "")

    def clean(self, n: int) -> bool:
        """Whether the case at n units names what it asks unambiguously: every planted number
        only where it was planted, each `once` text exactly once in the haystack."""
        text, planted = "".join(self.segments(n)), "".join(piece for _, piece in self.inserts)
        units = self.joiner.join(self.units(n))
        return all(text.count(v) == planted.count(v) for v in self.values) and all(
            units.count(piece) == 1 for piece in self.once
        )

    def segments(self, n: int) -> tuple[str, ...]:
        units = list(self.units(n))
        for depth, piece in sorted(self.inserts, reverse=True):  # deepest first keeps indices
            at = self.place(units, depth) if self.place else round(depth * len(units))
            units.insert(at, piece)
        return self.frame(self.joiner.join(units))
