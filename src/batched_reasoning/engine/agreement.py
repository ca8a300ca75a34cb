"""Whether a run's answers agree with the one-at-a-time run's, and where they part, why: a pick a
rounding away from changing (a near-tie: another batch size, kernel or mask rounds otherwise) or
not (a mismatch: a bug). Greedy runs keep each pick's top-two logit gap, sampled runs each pick's
distance to a boundary of its draw and the draw itself (`engine.generation.pick`)."""

from __future__ import annotations

import math


# A pick whose margin is below this may flip under the rounding that another batch size, kernel
# or mask brings: in float32 logits moved by ~5e-5 between batch 1 and 8 on Qwen3-0.6B; bfloat16
# and float16 logits around 10-20 have last places of 0.06 and 0.008. Greedy's margin is its
# top-two logit gap, a sampled pick's how far the logits must move to change its draw
# (`engine.sampling.boundary_margin`): the same unit, so one bound judges both.
NEAR_TIE_MARGIN = {"float64": 1e-9, "float32": 1e-3, "bfloat16": 0.25, "float16": 0.05}


def compare_answer(tokens: list[int], base_tokens: list[int], base_margins: list[float],
                   dtype: str, draws: list[float] | None = None,
                   base_draws: list[float] | None = None) -> str:
    """`same`, `near-tie` or `MISMATCH`: an answer against the sequential run's, judged at the
    first token where they part by how close the sequential run's pick there was to changing.
    A sampled answer (`draws` given) must also have drawn the same random numbers up to there:
    other numbers mean the rows' random streams differ, a bug however close the pick was."""
    if tokens == base_tokens:
        return "same"
    first = next((i for i, (a, b) in enumerate(zip(tokens, base_tokens)) if a != b),
                 min(len(tokens), len(base_tokens)))  # one answer ended where the other went on
    if draws is not None and base_draws is not None and draws[:first + 1] != base_draws[:first + 1]:
        return "MISMATCH"
    margin = base_margins[first] if first < len(base_margins) else math.inf
    return "near-tie" if margin < NEAR_TIE_MARGIN[dtype] else "MISMATCH"


def verdict(verdicts: list[str]) -> str:
    """`yes` where every answer is the same, else how many part by a near-tie and how many not."""
    ties, mismatches = verdicts.count("near-tie"), verdicts.count("MISMATCH")
    return "yes" if ties == mismatches == 0 else f"{ties} near-tie, {mismatches} MISMATCH"
