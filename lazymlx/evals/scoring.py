"""How answers are scored: whole against the gold, against the baseline's tokens, with intervals."""

from __future__ import annotations

import math
import random

Z95 = 1.959964  # the normal quantile of a two-sided 95% interval


def common_prefix(tokens: list[int], baseline: list[int]) -> int:
    """How many first tokens equal the baseline's."""
    count = 0
    for mine, theirs in zip(tokens, baseline, strict=False):
        if mine != theirs:
            break
        count += 1
    return count


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
) -> tuple[float, float]:
    """A 95% percentile-bootstrap interval of the pooled mean of `strata`, or of that mean minus
    `minus`'s pooled mean. Each stratum (a family at a length) is resampled within itself, so the
    mix of families stays the one that ran. Free-form agreement is bimodal (a continuation
    follows keep-all's to the end or parts early), which a normal interval misdescribes."""
    rng = random.Random(seed)

    def pooled_mean(groups: list[list[float]]) -> float:
        values = [v for group in groups for v in rng.choices(group, k=len(group))]
        return sum(values) / len(values)

    strata = [group for group in strata if group]
    minus = [group for group in minus or [] if group]
    means = sorted(
        pooled_mean(strata) - (pooled_mean(minus) if minus else 0.0) for _ in range(resamples)
    )
    return means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]
