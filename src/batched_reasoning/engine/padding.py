"""Padding: many prompts of different lengths as one rectangular batch."""

from __future__ import annotations

from typing import Sequence

import torch


def left_pad(
    sequences: Sequence[Sequence[int]], pad_token_id: int, device: str | torch.device = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (input_ids, attention_mask), both (batch, longest); mask True marks real tokens.

    Padding goes on the left so every row's last real token sits in the last column: the next
    token of all rows is then read from one position, and new tokens append in one column.
    """
    return _pad(sequences, pad_token_id, device, left=True)


def right_pad(
    sequences: Sequence[Sequence[int]], pad_token_id: int, device: str | torch.device = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """As `left_pad`, with the padding after each row's tokens: every row starts at position 0
    (how `continuous` prefills prompts straight into their own cache slots)."""
    return _pad(sequences, pad_token_id, device, left=False)


def _pad(sequences, pad_token_id, device, left: bool) -> tuple[torch.Tensor, torch.Tensor]:
    if not sequences:
        raise ValueError("pad: no sequences given")
    if any(len(s) == 0 for s in sequences):
        raise ValueError("pad: empty sequence (every prompt needs at least one token)")
    width = max(len(s) for s in sequences)
    input_ids = torch.full((len(sequences), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(sequences), width), dtype=torch.bool)
    for row, seq in enumerate(sequences):
        columns = slice(width - len(seq), width) if left else slice(0, len(seq))
        input_ids[row, columns] = torch.as_tensor(seq, dtype=torch.long)
        attention_mask[row, columns] = True
    return input_ids.to(device), attention_mask.to(device)


def pad_fraction(batch_lengths: Sequence[Sequence[int]]) -> float:
    """Share of padding among the cells of batches each padded to its longest sequence (one
    definition for the tokenized batches, the benchmark and distillation's micro-batches)."""
    cells = sum(len(lengths) * max(lengths) for lengths in batch_lengths)
    return 1.0 - sum(sum(lengths) for lengths in batch_lengths) / cells


def batches(indices: Sequence[int], batch_size: int) -> list[list[int]]:
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    return [list(indices[i:i + batch_size]) for i in range(0, len(indices), batch_size)]


def length_sorted(lengths: Sequence[int]) -> list[int]:
    """Indices ordered longest first (stable), so a batch holds prompts of similar length."""
    return sorted(range(len(lengths)), key=lambda i: -lengths[i])
