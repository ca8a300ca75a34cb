"""How sure a number is: intervals for accuracies, paired effects and effects across seeds.

An accuracy on n problems is a binomial proportion (Wilson's interval, which stays inside
[0, 1] and keeps its coverage near 0 and 1, where the normal one does not). An effect of a stage
compares two answers to the same problems, so its interval comes from the per-problem
differences (paired), which is far narrower than two independent intervals would suggest. An
effect across seeds is summarised by its mean and a percentile bootstrap of that mean, as
rliable recommends for the few runs RL results rest on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

Z95 = 1.959963984540054  # the normal quantile of a two-sided 95% interval
BOOTSTRAP_RESAMPLES = 10_000


def wilson_interval(correct: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of the proportion `correct / n`."""
    if n <= 0:
        raise ValueError(f"an accuracy needs at least one problem, got n={n}")
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def paired_difference(after: Sequence[float], before: Sequence[float],
                      z: float = Z95) -> tuple[float, float, float]:
    """(mean difference, low, high): `after - before` on the same problems, with the normal
    interval of the mean of the per-problem differences (its standard error is the sample
    standard deviation of the differences over sqrt(n), as lm-evaluation-harness's paired
    comparisons use)."""
    a, b = np.asarray(after, dtype=float), np.asarray(before, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or len(a) == 0:
        raise ValueError(f"a paired difference needs two equal, non-empty lists of per-problem "
                         f"scores; got {a.shape} and {b.shape}")
    differences = a - b
    mean = float(differences.mean())
    if len(differences) < 2:
        return mean, -math.inf, math.inf
    half = z * float(differences.std(ddof=1)) / math.sqrt(len(differences))
    return mean, mean - half, mean + half


def bootstrap_mean_interval(values: Sequence[float], seed: int = 0,
                            resamples: int = BOOTSTRAP_RESAMPLES,
                            level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): the percentile bootstrap interval of the mean of `values` (e.g. one
    effect per seed). Seeded, so a table is the same every time it is made."""
    data = np.asarray(values, dtype=float)
    if data.ndim != 1 or len(data) == 0:
        raise ValueError(f"a bootstrap needs a non-empty list of values, got shape {data.shape}")
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, len(data), size=(resamples, len(data)))].mean(axis=1)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(data.mean()), float(low), float(high)


def includes_zero(low: float, high: float) -> bool:
    """Whether an effect's interval cannot tell it from no effect."""
    return low <= 0 <= high
