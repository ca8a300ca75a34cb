"""The timing harness on fake clocks and known timings: warm-up excluded, repeats until the
interval is tight, intervals from Student's t, a winner only where intervals separate."""

import itertools
import math
from types import SimpleNamespace

import pytest

from batched_reasoning.core.timing import Repeats, Summary, repeat, summarize, t95, winner
from batched_reasoning.stages import timing as timing_stage


def test_t_quantiles_are_the_published_ones():
    assert t95(1) == 12.706 and t95(2) == 4.303 and t95(4) == 2.776 and t95(30) == 2.042
    assert t95(31) == 1.960  # the normal's beyond the table
    with pytest.raises(ValueError, match="at least 2 repeats"):
        t95(0)


def test_summary_is_the_median_and_the_t_interval_of_the_mean():
    summary = summarize([10.0, 11.0, 12.0, 15.0])
    # mean 12, sample sd sqrt(14/3), t(3) = 3.182
    half = 3.182 * math.sqrt(14 / 3) / 2
    assert summary.median == 11.5 and summary.n == 4
    assert summary.low == pytest.approx(12 - half) and summary.high == pytest.approx(12 + half)
    assert summary.relative_half_width == pytest.approx(half / 11.5)


def test_warm_up_is_not_counted_and_repeats_stop_once_tight():
    values = iter([100.0, 101.0, 99.0, 100.0, 100.5, 500.0])
    warmed = []
    summaries, samples = repeat(lambda: {"tokens_per_s": next(values)}, Repeats(3, 6, 0.05),
                                ("tokens_per_s",), warm_up=lambda: warmed.append(1))
    assert warmed == [1]
    # three repeats of ~100 give +-2.5%: tight at the minimum
    assert [s["tokens_per_s"] for s in samples] == [100.0, 101.0, 99.0]
    assert summaries["tokens_per_s"].median == 100.0


def test_noisy_repeats_go_on_until_the_maximum():
    values = itertools.cycle([50.0, 150.0])
    summaries, samples = repeat(lambda: {"tokens_per_s": next(values), "other": 1.0},
                                Repeats(3, 5, 0.05), ("tokens_per_s",))
    assert len(samples) == 5 and summaries["tokens_per_s"].n == 5
    assert summaries["other"].median == 1.0  # every number is summarised, watched or not


def test_repeats_need_a_minimum_of_two():
    with pytest.raises(ValueError, match="minimum"):
        Repeats(1, 3)


def summary(median, half):
    return Summary(median, median - half, median + half, 3)


def test_a_clear_winner_is_named():
    best, tied = winner({"a": summary(100, 5), "b": summary(80, 5), "c": summary(50, 5)})
    assert best == "a" and tied == ["a"]


def test_overlapping_intervals_are_a_tie_not_a_winner():
    best, tied = winner({"a": summary(100, 15), "b": summary(90, 10), "c": summary(50, 5)})
    assert best is None and tied == ["a", "b"]


def test_lower_is_better_for_latency():
    best, tied = winner({"a": summary(1.0, 0.1), "b": summary(2.0, 0.1)}, higher_is_better=False)
    assert best == "a" and tied == ["a"]


def test_one_setting_names_no_best():
    assert winner({"only": summary(100, 1)}) == (None, [])


def test_one_repeat_times_a_client_view_on_a_fake_clock(monkeypatch):
    """Submission at 0: two answers done at 2 s and 4 s of a 4 s repeat, 10 tokens in all."""
    ticks = iter([10.0, 14.0])
    monkeypatch.setattr(timing_stage.time, "perf_counter", lambda: next(ticks))
    result = SimpleNamespace(
        generated_tokens=10, completion=[2.0, 4.0], latency=[2.0, 1.0],
        time_to_first_token=[0.5, 3.0], time_per_output_token=[0.25, 0.5],
        decode_seconds=3.0, prefill_seconds=1.0, decode_steps=6, tokens=[[1], [2]])
    numbers, _ = timing_stage.one_repeat(lambda: result)
    assert numbers["tokens_per_s"] == 2.5 and numbers["wall_s"] == 4.0
    assert numbers["completion_p50_s"] == 3.0
    assert numbers["completion_p99_s"] == pytest.approx(3.98)
    assert numbers["service_p50_s"] == 1.5 and numbers["ttft_p50_s"] == 1.75
    assert numbers["tpot_p50_ms"] == 375.0
    assert numbers["decode_step_ms"] == 500.0 and numbers["decode_share"] == 0.75
