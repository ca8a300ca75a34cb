"""Temperature and top-p sampling (greedy decoding is generation's default).

A sampled row draws its random numbers from its own generator, seeded from a key that names the
row (e.g. problem and sample index). A row's text then does not depend on the batch it shares.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch


def row_seed(seed: int, key: Sequence[int]) -> int:
    """A 63-bit seed mixed from the run seed and a row's key, stable across processes."""
    return int(np.random.SeedSequence([seed, *key]).generate_state(1, dtype=np.uint64)[0] >> 1)


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
        """One generator per prompt, in prompt order; `rows` in calls index into this list."""
        self.generators = []
        for key in keys:
            g = torch.Generator(device=device)
            g.manual_seed(row_seed(self.seed, key))
            self.generators.append(g)

    def __call__(self, logits: torch.Tensor, rows: list[int]) -> torch.Tensor:
        probs = torch.softmax(logits.float() / self.temperature, dim=-1)
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        cumulative = sorted_probs.cumsum(dim=-1)
        sorted_probs = sorted_probs.masked_fill(cumulative - sorted_probs >= self.top_p, 0.0)
        cumulative = sorted_probs.cumsum(dim=-1)
        uniform = torch.cat(
            [torch.rand(1, generator=self.generators[r], device=logits.device) for r in rows]
        )
        threshold = uniform[:, None] * cumulative[:, -1:]
        choice = (cumulative < threshold).sum(dim=-1).clamp(max=cumulative.shape[-1] - 1)
        return order.gather(-1, choice[:, None]).squeeze(-1)
