"""How a generation is scored: against the gold answer, and against the baseline's own output."""

from __future__ import annotations

from lazymlx.evals.tasks import Case

AGREE_TOKENS = 8  # the answers of these tasks fit in 8 tokens, except a UUID's tail


def correct(case: Case, text: str) -> bool:
    """Right when the gold value appears whole in the generated text (RULER's string match,
    with no letter or digit run on at either end)."""
    return case.correct(text)


def agrees(tokens: list[int], baseline: list[int], first: int = AGREE_TOKENS) -> bool:
    """Exact match of the first `first` greedy tokens with the baseline's (fewer if both stopped)."""
    return tokens[:first] == baseline[:first]
