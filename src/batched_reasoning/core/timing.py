"""Timing the way a benchmark harness does: a warm-up that is not counted, repeats until the
interval is tight enough, and a winner named only where the intervals say so.

A repeat is one run of the whole workload. Each of its numbers (tokens/s, a latency
percentile, a step time) is summarised over the repeats by its median and a 95% interval of
their mean (Student's t: with 3 repeats the half-width is 2.48 standard deviations, so a noisy
machine shows as a wide interval instead of a confident number).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass

import psutil

# Two-sided 95% quantiles of Student's t by degrees of freedom (1-30); beyond, the normal's.
T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
       2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
       2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
Z95 = 1.960


def t95(degrees_of_freedom: int) -> float:
    if degrees_of_freedom < 1:
        raise ValueError(f"an interval needs at least 2 repeats, got {degrees_of_freedom + 1}")
    return T95[degrees_of_freedom - 1] if degrees_of_freedom <= len(T95) else Z95


@dataclass(frozen=True)
class Summary:
    """A number measured `n` times: the median, and the 95% interval of the mean."""

    median: float
    low: float
    high: float
    n: int

    @property
    def relative_half_width(self) -> float:
        """Half the interval over the median: 0.05 means +-5%."""
        return (self.high - self.low) / 2 / abs(self.median) if self.median else math.inf

    def clear_of(self, other: Summary) -> bool:
        """Whether this interval lies wholly above `other`'s."""
        return self.low > other.high

    def as_dict(self) -> dict:
        return asdict(self)


# Fewer repeats give a 95% interval, but no useful one: with 2, t is 12.7 standard errors wide
# each side, so a ratio of two such intervals reads like `[0.03, inf]`. Tables show none instead.
INTERVAL_REPEATS = 3


def summarize(values: list[float]) -> Summary:
    """Median and 95% t-interval of the mean of `values` (at least 2)."""
    n = len(values)
    mean = statistics.fmean(values)
    half = t95(n - 1) * statistics.stdev(values) / math.sqrt(n)
    return Summary(statistics.median(values), mean - half, mean + half, n)


@dataclass(frozen=True)
class Repeats:
    """How often to repeat: at least `minimum` times, then until every watched number's
    interval is within `relative_half_width` of its median, or `maximum` repeats."""

    minimum: int = 3
    maximum: int = 6
    relative_half_width: float = 0.05

    @classmethod
    def from_config(cls, timing: Mapping) -> Repeats:
        """From the config's `timing` section."""
        return cls(timing["minimum_repeats"], timing["maximum_repeats"],
                   timing["relative_half_width"])

    def __post_init__(self):
        if not 2 <= self.minimum <= self.maximum:
            raise ValueError(f"repeats: need 2 <= minimum ({self.minimum}) <= maximum "
                             f"({self.maximum})")


def repeat(run: Callable[[], Mapping[str, float]], repeats: Repeats,
           watch: tuple[str, ...], warm_up: Callable[[], object] | None = None
           ) -> tuple[dict[str, Summary], list[dict[str, float]]]:
    """Run `warm_up` once (not counted), then `run` as `repeats` says, judging the interval of
    the `watch`ed numbers. Returns every number's summary and the raw repeats."""
    if warm_up is not None:
        warm_up()
    samples: list[dict[str, float]] = []
    while True:
        samples.append(dict(run()))
        if len(samples) < repeats.minimum:
            continue
        summaries = {key: summarize([s[key] for s in samples]) for key in samples[0]}
        tight = all(summaries[key].relative_half_width <= repeats.relative_half_width
                    for key in watch)
        if tight or len(samples) >= repeats.maximum:
            return summaries, samples


def winner(summaries: Mapping[str, Summary], higher_is_better: bool = True
           ) -> tuple[str | None, list[str]]:
    """(the best, if its interval is clear of every other's; else None), and the ones that tie
    for best: the best median and every candidate whose interval overlaps its interval. One
    candidate is no comparison: no best, no tie."""
    if len(summaries) < 2:
        return None, []
    sign = 1 if higher_is_better else -1
    best = max(summaries, key=lambda name: sign * summaries[name].median)
    top = summaries[best]

    def clear(other: Summary) -> bool:
        return top.clear_of(other) if higher_is_better else other.clear_of(top)

    tied = [name for name, summary in summaries.items() if name == best or not clear(summary)]
    return (best if tied == [best] else None), tied


def setup_seconds() -> float:
    """Seconds since this process started: the interpreter, imports and loading so far, which a
    job pays before its work (the book's total times include it)."""
    return time.time() - psutil.Process().create_time()
