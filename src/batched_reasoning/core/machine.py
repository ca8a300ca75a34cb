"""What this machine can do: its sustained read bandwidth and matrix throughput, the two
limits a decode step's roofline bound is made of (`engine.roofline`)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import torch

from . import calibration
from .devices import synchronize


@dataclass
class MachineLimits:
    read_gb_s: float  # sustained read bandwidth (a sum over a tensor far larger than the caches)
    matmul_gflop_s: float  # a square product: the faster of the benchmark's dtype and float32
    matmul_dtype: str = "float32"  # which of the two that was

    def as_dict(self) -> dict:
        return asdict(self)


def _best_seconds(work, device: torch.device, repeats: int) -> float:
    work()  # warm-up: thread pools, page faults
    best = float("inf")
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        work()
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return best


# The longest one timed product may take, and the product that first estimates the rate.
PRODUCT_SECONDS = 0.25
PROBE_SIZE = 256


def timed_size(size: int, estimated_gflop_s: float, seconds: float = PRODUCT_SECONDS) -> int:
    """The side of the product to time: `size`, or smaller if a product of it would take over
    `seconds` at the estimated rate (never under `PROBE_SIZE`, nor over `size`)."""
    fits = int((estimated_gflop_s * 1e9 * seconds / 2) ** (1 / 3))
    return min(size, max(fits, PROBE_SIZE))


def product_gflop_s(device: torch.device, dtype: torch.dtype, size: int, repeats: int) -> float:
    """The rate of a square product of side `size` in `dtype`, the best of `repeats`. A
    `PROBE_SIZE` product estimates the rate first, and a dtype too slow for `size` is timed
    smaller (`timed_size`): bfloat16 without a native kernel (an AVX2 CPU) multiplies at
    ~0.05 GFLOP/s, where a 2048² product takes minutes."""
    def rate(side: int, repeats: int) -> float:
        a = torch.randn(side, side, device=device).to(dtype)
        b = torch.randn(side, side, device=device).to(dtype)
        return 2 * side**3 / _best_seconds(lambda: a @ b, device, repeats) / 1e9

    return rate(timed_size(size, rate(min(size, PROBE_SIZE), 1)), repeats)


def measure_machine(device: torch.device, dtype: torch.dtype, read_mb: int = 512,
                    matmul_size: int = 2048, repeats: int = 5) -> MachineLimits:
    """A STREAM-like read (sum of `read_mb` MB of float32) and a `matmul_size`² product, each
    the best of `repeats` (a second or two on a laptop CPU). The product's rate is the faster of
    `dtype`'s and float32's: any product can run in float32, so a dtype whose kernel is slower
    (bfloat16 on a CPU without AVX512-BF16 took seconds here) does not lower the machine's
    limit, and the bound keeps telling how far the step is from what the machine can do."""
    data = torch.ones(read_mb * 2**20 // 4, dtype=torch.float32, device=device)
    read_s = _best_seconds(lambda: data.sum(), device, repeats)
    rates = {str(d).removeprefix("torch."): product_gflop_s(device, d, matmul_size, repeats)
             for d in dict.fromkeys([dtype, torch.float32])}
    fastest = max(rates, key=rates.get)
    return MachineLimits(read_gb_s=data.nbytes / read_s / 1e9, matmul_gflop_s=rates[fastest],
                         matmul_dtype=fastest)


def machine_limits(device: torch.device, dtype: torch.dtype) -> MachineLimits:
    """`measure_machine` once per machine, thread count and dtype, kept in the wisdom file
    (`calibration`) so every timed job of a run compares against the same limits."""
    name = f"machine_limits/{device.type}/{str(dtype).removeprefix('torch.')}"
    measured = calibration.choose(
        name, lambda: {"choice": measure_machine(device, dtype).as_dict()})
    return MachineLimits(**measured["choice"])
