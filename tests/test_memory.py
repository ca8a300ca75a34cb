"""Peak memory on CPU: the kernel's own peak RSS, reset per region, nested regions included."""

import time

import numpy as np
import pytest

from batched_reasoning.core import memory
from batched_reasoning.core.memory import PeakMemory, process_rss_mb

MB = 2**20
KERNEL = pytest.mark.skipif(not memory.KERNEL_PEAK, reason="this kernel does not reset VmHWM")


def hold_briefly(mb: int) -> None:
    """Touch `mb` MiB of fresh pages and free them at once (a few milliseconds)."""
    block = np.ones(mb * MB // 8)
    del block


@KERNEL
def test_a_brief_allocation_is_in_the_peak_and_a_later_region_starts_afresh():
    before = process_rss_mb()
    with PeakMemory("cpu") as first:
        hold_briefly(200)
    assert first.peak_mb >= before + 195  # the pages were resident, however briefly
    with PeakMemory("cpu") as second:
        pass
    assert second.peak_mb < first.peak_mb - 150  # the earlier peak was reset


@KERNEL
def test_an_inner_region_hands_the_outer_one_its_peak_so_far():
    with PeakMemory("cpu") as outer:
        hold_briefly(200)
        with PeakMemory("cpu") as inner:
            hold_briefly(50)
    assert inner.peak_mb < outer.peak_mb - 100
    assert outer.peak_mb >= process_rss_mb() + 195


def test_without_the_kernel_peak_a_thread_samples_the_rss(monkeypatch):
    """The fallback of macOS and sandboxes: it sees what stays resident for some milliseconds."""
    monkeypatch.setattr(memory, "KERNEL_PEAK", False)
    before = process_rss_mb()
    with PeakMemory("cpu") as region:
        block = np.ones(200 * MB // 8)
        time.sleep(0.05)
        del block
    assert region.peak_mb >= before + 195


def test_the_measure_says_what_was_measured():
    assert PeakMemory("cpu").measure == memory.MEASURES["cpu"]
    assert ("VmHWM" in memory.MEASURES["cpu"]) == memory.KERNEL_PEAK
