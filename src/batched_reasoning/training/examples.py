"""Training examples (prompt + answer, trained on the answer) and their batches: left-padded, or
packed several to a row, and the order an epoch visits them in."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..engine.padding import batches, left_pad, length_sorted


@dataclass(frozen=True)
class Example:
    """Token ids of prompt + answer + end token; the first `prompt_len` are not trained on."""

    ids: list[int]
    prompt_len: int


def collate(examples: list[Example], pad_token_id: int, device="cpu"):
    """(input_ids, attention_mask, loss_mask), left-padded; loss_mask marks answer tokens only."""
    input_ids, attention_mask = left_pad([e.ids for e in examples], pad_token_id, device)
    width = input_ids.shape[1]
    answer_start = torch.tensor([width - len(e.ids) + e.prompt_len for e in examples], device=device)
    loss_mask = torch.arange(width, device=device)[None, :] >= answer_start[:, None]
    return input_ids, attention_mask, loss_mask


PACK_TOKENS = 128  # a packed row's least room; rows as long as the longest example cost least


def pack(examples: list[Example], pad_token_id: int, device="cpu",
         capacity: int = PACK_TOKENS):
    """(input_ids, segment_ids, loss_mask): the examples laid end to end in as few rows as fit
    (first fit, longest first), so a batch of short and long examples computes no padding but
    the end of each row. Segment i + 1 is the i-th example, 0 the padding; loss_mask marks
    answer tokens. A row holds `capacity` tokens, or the longest example if it is longer."""
    capacity = max(capacity, max(len(e.ids) for e in examples))
    rows: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(examples)), key=lambda i: -len(examples[i].ids)):
        row = next((r for r, free in enumerate(room) if free >= len(examples[i].ids)), None)
        if row is None:
            rows.append([])
            room.append(capacity)
            row = len(rows) - 1
        rows[row].append(i)
        room[row] -= len(examples[i].ids)
    width = capacity - min(room)
    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    segment_ids = torch.zeros((len(rows), width), dtype=torch.long)
    loss_mask = torch.zeros((len(rows), width), dtype=torch.bool)
    for r, members in enumerate(rows):
        at = 0
        for i in members:
            ids = examples[i].ids
            input_ids[r, at:at + len(ids)] = torch.tensor(ids)
            segment_ids[r, at:at + len(ids)] = i + 1
            loss_mask[r, at + examples[i].prompt_len:at + len(ids)] = True
            at += len(ids)
    return input_ids.to(device), segment_ids.to(device), loss_mask.to(device)


def epoch_batches(lengths: list[int], batch_size: int, seed: int, epoch: int,
                  sort_by_length: bool) -> list[list[int]]:
    """One epoch's batches, a function of (seed, epoch) alone so a resumed run replays them.

    Sorting puts examples of similar length together (less padding); the batch order is then
    shuffled, so training does not march from long examples to short ones.
    """
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(lengths)).tolist()
    if not sort_by_length:
        return batches(order, batch_size)
    order = [order[i] for i in length_sorted([lengths[i] for i in order])]
    groups = batches(order, batch_size)
    return [groups[i] for i in rng.permutation(len(groups))]
