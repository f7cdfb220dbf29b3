"""How answers are scored: whole against the gold, against the baseline's tokens, with intervals."""

from __future__ import annotations

import difflib
import math
import re

import numpy as np
from mlx_lm.utils import common_prefix_len

Z95 = 1.959964  # the normal quantile of a two-sided 95% interval


# how many first tokens equal the baseline's: mlx-lm's, under the name the eval's studies use
common_prefix = common_prefix_len


def wilson(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion: sound at 0 and at n of n, where the normal
    approximation collapses to a point (the share of answers kept is usually near 1)."""
    if trials == 0:
        return 0.0, 1.0
    p = successes / trials
    center = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = (
        z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    )
    low = 0.0 if successes == 0 else center - half
    high = 1.0 if successes == trials else center + half
    return low, high


def bootstrap_interval(
    strata: list[list[float]],
    minus: list[list[float]] | None = None,
    resamples: int = 10_000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float]:
    """A percentile-bootstrap interval (95% unless `level` says) of the pooled mean of `strata`,
    or of that mean minus `minus`'s pooled mean. Each stratum (a family at a length) is
    resampled within itself, so the mix of families stays the one that ran. Free-form agreement
    is bimodal (a continuation follows keep-all's to the end or parts early), which a normal
    interval misdescribes; a paired difference is given as one stratum list of differences."""
    rng = np.random.default_rng(seed)

    def pooled_means(groups: list[list[float]]) -> np.ndarray:
        """`resamples` pooled means, each group drawn with replacement at its own size."""
        total = np.zeros(resamples)
        for group in groups:
            values = np.asarray(group, dtype=np.float64)
            total += values[rng.integers(0, values.size, (resamples, values.size))].sum(axis=1)
        return total / sum(len(group) for group in groups)

    strata = [group for group in strata if group]
    minus = [group for group in minus or [] if group]
    means = np.sort(pooled_means(strata) - (pooled_means(minus) if minus else 0.0))
    tail = (1 - level) / 2
    return float(means[int(tail * resamples)]), float(means[int((1 - tail) * resamples) - 1])


# --- open-ended answers: compared with a text (the gold, or stock's as a diagnostic) ---------

# A loop: the same run of words repeated back to back at least LOOP_REPEATS times, covering at
# least LOOP_WORDS words ("- Fixes tests" twelve times; "the function that reads" three times).
LOOP_REPEATS, LOOP_WORDS, LOOP_UNIT = 3, 12, 16


def words(text: str) -> list[str]:
    """Lower-cased words and punctuation marks, as ROUGE tokenizes."""
    return re.findall(r"\w+|[^\w\s]", text.lower())


def rouge_l(candidate: str, reference: str) -> float:
    """ROUGE-L F1 over words: the longest common subsequence against both lengths (1 for two
    empty texts)."""
    a, b = words(candidate), words(reference)
    if not a or not b:
        return float(a == b)
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b):
            current.append(previous[j] + 1 if x == y else max(previous[j + 1], current[j]))
        previous = current
    common = previous[-1]
    if not common:
        return 0.0
    precision, recall = common / len(a), common / len(b)
    return 2 * precision * recall / (precision + recall)


def first_line(text: str) -> str:
    """The first line that holds anything, stripped (a code completion's line)."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def edit_similarity(candidate: str, reference: str) -> float:
    """Similarity of two lines of code, 0-1 (LongBench's LCC score, difflib's ratio standing in
    for its Levenshtein ratio)."""
    if not candidate and not reference:
        return 1.0
    return difflib.SequenceMatcher(None, candidate, reference, autojunk=False).ratio()


def loops(text: str) -> bool:
    """Whether the text repeats one run of words back to back (LOOP_REPEATS times or more,
    LOOP_WORDS words in all): what a starved model writes instead of an answer."""
    tokens = words(text)
    for unit in range(1, LOOP_UNIT + 1):
        repeats = max(LOOP_REPEATS, -(-LOOP_WORDS // unit))
        span = unit * repeats
        for start in range(len(tokens) - span + 1):
            piece = tokens[start : start + unit]
            if all(
                tokens[start + k * unit : start + (k + 1) * unit] == piece
                for k in range(1, repeats)
            ):
                return True
    return False
