"""Peak memory of a code region, as well as each platform lets it be measured: the CUDA
allocator's peak, the MPS driver's allocation (sampled), or the process RSS on CPU (sampled)."""

from __future__ import annotations

import threading

import psutil
import torch



def process_rss_mb() -> float:
    """This process's resident set size now (MiB)."""
    return psutil.Process().memory_info().rss / 2**20


MEASURES = {
    "cpu": "process RSS, sampled every ms",
    "cuda": "CUDA allocator peak (tensors)",
    "mps": "MPS driver allocation, sampled every ms (no peak counter on MPS)",
}


class PeakMemory:
    """Context manager; `peak_mb` after exit, and `measure` says what was measured.

    On CPU the process's resident set size is sampled by a thread every millisecond, since
    `ru_maxrss` is a lifetime peak that cannot be reset between measurements in one process.
    MPS has no peak counter either, so the driver's allocation is sampled the same way.
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
        self._stop.set()
        self._thread.join()
        self._peak = max(self._peak, self._now())
        self.peak_mb = self._peak / 2**20
