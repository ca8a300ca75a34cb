"""Peak memory of a code region, as well as each platform lets it be measured: the CUDA
allocator's peak, the kernel's own peak RSS on Linux, and elsewhere (macOS's RSS, the MPS
driver's allocation) a sample every millisecond."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import psutil
import torch

CLEAR_REFS = Path("/proc/self/clear_refs")
STATUS = Path("/proc/self/status")


def process_rss_mb() -> float:
    """This process's resident set size now (MiB)."""
    return psutil.Process().memory_info().rss / 2**20


# Whether this kernel lets the process reset its peak RSS (VmHWM): Linux, by writing 5 to
# clear_refs, which an unprivileged process may do for itself.
KERNEL_PEAK = os.access(CLEAR_REFS, os.W_OK) and STATUS.is_file()
MEASURES = {
    "cpu": ("process peak RSS (kernel VmHWM)" if KERNEL_PEAK
            else "process RSS, sampled every ms"),
    "cuda": "CUDA allocator peak (tensors)",
    "mps": "MPS driver allocation, sampled every ms (no peak counter on MPS)",
}


def _kernel_peak_bytes() -> int:
    for line in STATUS.read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{STATUS} has no VmHWM line")


_open_cpu_measures: list["PeakMemory"] = []


class PeakMemory:
    """Context manager; `peak_mb` after exit, and `measure` says what was measured.

    On Linux the kernel keeps the process's peak RSS (VmHWM) and resets it on request, so the
    peak is exact: sampling missed peaks of a few milliseconds (seen: 100 MB of 580 in the
    prefill of a long batch). A reset inside a region that another PeakMemory measures first
    hands the peak so far to that one. The reset is the process's own: what reads its lifetime
    peak afterwards (`getrusage`'s `ru_maxrss`, `/usr/bin/time -v`) sees the peak since the last
    region began. Where the kernel offers no reset (macOS, some sandboxes) and for MPS, which has
    no peak counter, a thread samples every millisecond.
    """

    def __init__(self, device: torch.device | str, interval: float = 0.001):
        self.device = torch.device(device)
        self.interval = interval
        self.peak_mb = 0.0
        self.measure = MEASURES[self.device.type]

    def __enter__(self) -> "PeakMemory":
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            return self
        if self.device.type == "cpu" and KERNEL_PEAK:
            peak_so_far = _kernel_peak_bytes()
            for outer in _open_cpu_measures:
                outer._peak = max(outer._peak, peak_so_far)
            CLEAR_REFS.write_text("5")
            self._peak = 0
            _open_cpu_measures.append(self)
            return self
        self._process = psutil.Process()
        self._peak = self._now()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _now(self) -> int:
        if self.device.type == "mps":
            return torch.mps.driver_allocated_memory()
        return self._process.memory_info().rss

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self._peak = max(self._peak, self._now())

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak_mb = torch.cuda.max_memory_allocated(self.device) / 2**20
            return
        if self.device.type == "cpu" and KERNEL_PEAK:
            _open_cpu_measures.remove(self)
            self.peak_mb = max(self._peak, _kernel_peak_bytes()) / 2**20
            return
        self._stop.set()
        self._thread.join()
        self._peak = max(self._peak, self._now())
        self.peak_mb = self._peak / 2**20
