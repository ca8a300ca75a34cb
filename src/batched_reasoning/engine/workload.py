"""The shape of a generation workload, which decides what batching strategy pays.

A reasoning model's answers vary widely in length. The plain batched loop then keeps decoding
rows that already finished until its longest row ends; dropping them (`batched_stop`) or
refilling their slots (`continuous`) only pays where that waste is large.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .padding import pad_fraction


def length_stats(lengths: Sequence[int]) -> dict[str, float]:
    """min, median, p90, max and coefficient of variation (standard deviation over mean)."""
    values = np.asarray(lengths, dtype=float)
    if values.size == 0:
        raise ValueError("length_stats: no lengths")
    mean = values.mean()
    return {"min": float(values.min()), "median": float(np.median(values)),
            "p90": float(np.percentile(values, 90)), "max": float(values.max()),
            "cv": float(values.std() / mean) if mean else 0.0}


def finished_row_share(steps: Sequence[int], batch_rows: Sequence[Sequence[int]]) -> float:
    """Share of the plain batched loop's row-steps spent on rows that had already finished:
    each batch decodes all its rows until its longest answer's last step, so a row of `s`
    steps in a batch whose longest takes `m` idles for `m - s` of them (the answers' padding).
    `steps[i]` is answer i's picks, `batch_rows` the prompt indices of each batch."""
    return pad_fraction([[steps[i] for i in rows] for rows in batch_rows])
