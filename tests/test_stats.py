"""Intervals: Wilson for accuracies, paired for effects, bootstrap across seeds."""

import math

import numpy as np
import pytest

from batched_reasoning.workflow.stats import (
    bootstrap_mean_interval,
    includes_zero,
    paired_difference,
    wilson_interval,
)


@pytest.mark.parametrize("correct, n, expected", [
    (0, 10, (0.0, 0.2775)),      # Wilson (1927); a normal interval would be [0, 0]
    (5, 10, (0.2366, 0.7634)),
    (10, 10, (0.7225, 1.0)),
    (81, 263, (0.2553, 0.3662)),  # Newcombe (1998), table I, example (f)
])
def test_wilson_interval_matches_published_values(correct, n, expected):
    low, high = wilson_interval(correct, n)
    assert low == pytest.approx(expected[0], abs=1e-4)
    assert high == pytest.approx(expected[1], abs=1e-4)


def test_wilson_interval_covers_the_true_accuracy_about_95_percent_of_the_time():
    rng = np.random.default_rng(0)
    for p, n in ((0.05, 50), (0.5, 100), (0.9, 500)):
        draws = rng.binomial(n, p, size=4000)
        covered = np.mean([low <= p <= high for low, high in (wilson_interval(k, n) for k in draws)])
        assert 0.93 <= covered <= 0.975, (p, n, covered)


def test_paired_difference_of_a_worked_example():
    # differences 1, 0, 0, -1: mean 0, sample sd sqrt(2/3), standard error sqrt(2/3)/2
    mean, low, high = paired_difference([1, 1, 1, 0], [0, 1, 1, 1])
    half = 1.959964 * math.sqrt(2 / 3) / 2
    assert mean == 0 and low == pytest.approx(-half, rel=1e-6) and high == pytest.approx(half, rel=1e-6)
    assert paired_difference([1, 0, 1], [1, 0, 1]) == (0.0, 0.0, 0.0)


def test_pairing_is_narrower_than_independent_intervals_when_answers_agree():
    rng = np.random.default_rng(1)
    before = rng.random(500) < 0.5
    after = before | (rng.random(500) < 0.2)  # the same problems, a few more solved
    mean, low, high = paired_difference(after, before)
    a_low, a_high = wilson_interval(after.sum(), 500)
    b_low, b_high = wilson_interval(before.sum(), 500)
    assert high - low < 0.5 * ((a_high - a_low) + (b_high - b_low))
    assert low > 0  # the gain is real and the paired interval sees it, the separate ones overlap
    assert a_low < b_high


def test_paired_difference_refuses_unpaired_lists():
    with pytest.raises(ValueError, match="equal, non-empty"):
        paired_difference([1, 0], [1])


def test_bootstrap_interval_is_seeded_and_brackets_the_mean():
    values = [0.12, 0.08, 0.15, 0.10, 0.11]
    mean, low, high = bootstrap_mean_interval(values)
    assert (mean, low, high) == bootstrap_mean_interval(values)
    assert low < mean < high and mean == pytest.approx(np.mean(values))
    assert min(values) <= low and high <= max(values)
    assert bootstrap_mean_interval([0.1] * 5) == pytest.approx((0.1, 0.1, 0.1))


def test_bootstrap_interval_approaches_the_normal_one_with_many_values():
    values = np.random.default_rng(2).normal(0.1, 0.05, size=400)
    _, low, high = bootstrap_mean_interval(values.tolist())
    half = 1.96 * values.std(ddof=1) / math.sqrt(len(values))
    assert (high - low) / 2 == pytest.approx(half, rel=0.1)


def test_includes_zero():
    assert includes_zero(-0.01, 0.05) and includes_zero(0.0, 0.1)
    assert not includes_zero(0.01, 0.05) and not includes_zero(-0.05, -0.01)
