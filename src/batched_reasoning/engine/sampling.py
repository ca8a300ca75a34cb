"""Temperature and top-p sampling (greedy decoding is generation's default).

A sampled row's random numbers are a function of a key that names the row (e.g. problem and
sample index) and of how many it has drawn: its k-th uniform is a SplitMix64 hash of (row seed,
k). A row's text then does not depend on the batch it shares, and one step draws every row's
number with a fixed handful of elementwise kernels, however many rows there are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch


def row_seed(seed: int, key: Sequence[int]) -> int:
    """A 63-bit seed mixed from the run seed and a row's key, stable across processes."""
    return int(np.random.SeedSequence([seed, *key]).generate_state(1, dtype=np.uint64)[0] >> 1)


def _int64(value: int) -> int:
    """An unsigned 64-bit constant as the signed int64 with the same bits."""
    return value - (1 << 64) if value >= 1 << 63 else value


GOLDEN = _int64(0x9E3779B97F4A7C15)
MIX1 = _int64(0xBF58476D1CE4E5B9)
MIX2 = _int64(0x94D049BB133111EB)


def _shift_right(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical (unsigned) right shift of int64 bits: torch's `>>` extends the sign."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def counter_uniform(seeds: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    """Uniform floats in [0, 1), one per row: SplitMix64 of `seed + (counter + 1) * golden`.

    int64 products wrap modulo 2**64 on CPU and CUDA alike, which is the arithmetic SplitMix64
    is defined in; 53 of the 64 bits become a float64.
    """
    x = seeds + (counters + 1) * GOLDEN
    x = (x ^ _shift_right(x, 30)) * MIX1
    x = (x ^ _shift_right(x, 27)) * MIX2
    x = x ^ _shift_right(x, 31)
    return _shift_right(x, 11).double() / float(1 << 53)


@dataclass
class TopP:
    """Temperature plus nucleus (top-p) sampling, by inverse CDF of one uniform draw per row."""

    temperature: float
    top_p: float
    seed: int

    def __post_init__(self):
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0 for sampling, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    def start(self, keys: Sequence[Sequence[int]], device) -> None:
        """One seed and draw counter per prompt, in prompt order; `rows` in calls index here."""
        self.seeds = torch.tensor([row_seed(self.seed, key) for key in keys], dtype=torch.int64,
                                  device=device)
        self.draws = torch.zeros(len(keys), dtype=torch.int64, device=device)

    def __call__(self, logits: torch.Tensor, rows: list[int]) -> torch.Tensor:
        probs = torch.softmax(logits.float() / self.temperature, dim=-1)
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        cumulative = sorted_probs.cumsum(dim=-1)
        sorted_probs = sorted_probs.masked_fill(cumulative - sorted_probs >= self.top_p, 0.0)
        cumulative = sorted_probs.cumsum(dim=-1)
        index = torch.tensor(rows, device=logits.device)
        uniform = counter_uniform(self.seeds[index], self.draws[index]).to(cumulative.dtype)
        self.draws[index] += 1
        threshold = uniform[:, None] * cumulative[:, -1:]
        choice = (cumulative < threshold).sum(dim=-1).clamp(max=cumulative.shape[-1] - 1)
        return order.gather(-1, choice[:, None]).squeeze(-1)
