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


def boundary_margin(sorted_probs: torch.Tensor, mass_before: torch.Tensor, kept: torch.Tensor,
                    cumulative: torch.Tensor, threshold: torch.Tensor, choice: torch.Tensor,
                    temperature: float, top_p: float) -> torch.Tensor:
    """How far every logit must move (each by at most that much) before a draw can change, one
    value per row, in logits: the unit of greedy's margin, so one float error bound judges both.

    Moving every logit by at most d moves each log-probability by at most 2d / T, so a sum of
    probabilities S by at most (2d / T) S. The draw changes only where that
    - carries the threshold across an end of the chosen token's interval (its distance to the
      nearer end against the sizes of both),
    - reorders the chosen token with a sorted neighbour (half their logit gap), or
    - moves the nucleus' cut (its mass' distance to `top_p`) by a token larger than the
      threshold's distance to an end.
    """
    width = cumulative.shape[-1]
    at = choice[:, None]

    def log_prob(position: torch.Tensor) -> torch.Tensor:
        return sorted_probs.gather(-1, position.clamp(0, width - 1)).log().squeeze(-1)

    upper = cumulative.gather(-1, at).squeeze(-1)
    lower = torch.where(choice > 0, cumulative.gather(-1, (at - 1).clamp(min=0)).squeeze(-1), 0.0)
    to_end = torch.minimum(threshold - lower, upper - threshold).clamp(min=0)
    margin = temperature * to_end / (2 * (upper + threshold)).clamp(min=1e-30)
    chosen, above, below = log_prob(at), log_prob(at - 1), log_prob(at + 1)
    gap = torch.minimum(torch.where(choice > 0, above - chosen, torch.inf),
                        torch.where(choice < width - 1, chosen - below, torch.inf))
    gap = gap.nan_to_num(nan=0.0)  # two probabilities that underflowed to 0 tie
    margin = torch.minimum(margin, temperature * gap / 2)
    inside = kept.sum(dim=-1, keepdim=True)  # the nucleus' size; the first token outside
    first_out = inside.clamp(max=width - 1)
    has_cut = (inside < width).squeeze(-1)
    cut_mass = torch.minimum(mass_before.gather(-1, first_out) - top_p,
                             top_p - mass_before.gather(-1, first_out - 1)).squeeze(-1).abs()
    cut_token = sorted_probs.gather(-1, first_out - 1).squeeze(-1)
    cut_matters = has_cut & (to_end <= cut_token)
    return torch.where(cut_matters, torch.minimum(margin, temperature * cut_mass / (2 * top_p)),
                       margin)


@dataclass
class TopP:
    """Temperature plus nucleus (top-p) sampling, by inverse CDF of one uniform draw per row.

    Beside each pick it keeps the row's uniform (`draws`: two runs of the same rows must draw the
    same numbers) and its `margins` (`boundary_margin`): where two runs of the same model part,
    equal draws and a margin under the float error of the logits mean rounding carried a draw
    across a boundary; different draws, or a large margin, a bug.
    """

    temperature: float
    top_p: float
    seed: int
    margins: torch.Tensor | None = None
    draws: torch.Tensor | None = None

    def __post_init__(self):
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0 for sampling, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    def start(self, keys: Sequence[Sequence[int]], device) -> None:
        """One seed and draw counter per prompt, in prompt order; `rows` in calls index here."""
        self.seeds = torch.tensor([row_seed(self.seed, key) for key in keys], dtype=torch.int64,
                                  device=device)
        self.draws_made = torch.zeros(len(keys), dtype=torch.int64, device=device)

    def __call__(self, logits: torch.Tensor, rows: list[int]) -> torch.Tensor:
        probs = torch.softmax(logits.float() / self.temperature, dim=-1)
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
        kept = mass_before < self.top_p
        cumulative = sorted_probs.masked_fill(~kept, 0.0).cumsum(dim=-1)
        index = torch.tensor(rows, device=logits.device)
        uniform = counter_uniform(self.seeds[index], self.draws_made[index])
        self.draws_made[index] += 1
        threshold = uniform.to(cumulative.dtype) * cumulative[:, -1]
        choice = (cumulative < threshold[:, None]).sum(dim=-1).clamp(max=cumulative.shape[-1] - 1)
        self.draws = uniform
        self.margins = boundary_margin(sorted_probs, mass_before, kept, cumulative,
                                       threshold, choice, self.temperature, self.top_p)
        return order.gather(-1, choice[:, None]).squeeze(-1)
