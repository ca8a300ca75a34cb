"""The decode step: one new token for every row, as a function of fixed-shape tensors.

Every strategy prefills its own way (a left-padded batch into a `KVCache`, prompts slot by slot
into a `SlotCache`) and then decodes through a `DecodeState`. Its whole state is tensors:
keys and values preallocated for every row (layer, row, head, position, dim), which cached
positions hold real tokens (`key_valid`), where each row writes its next key (`write_at`) and
the RoPE position of its next token (`rope_pos`). The step (`decode_step`) branches on no data,
so it can be traced once per shape and replayed (`compile`: `torch.compile` on CPU, CUDA graphs
on a GPU).

Shapes are chosen on the host, which knows every row's length without asking the device: a
step attends over the first `end` cached positions, and `rows` rows take part. Eager steps use
the exact longest length and drop a finished row (`batched_stop`, `continuous`) at once.
Compiled steps round both up to a power of two (a length bucket and a batch bucket; finished
rows stay, masked, until the live ones fit the next smaller bucket), so a run compiles at most
one graph per (batch bucket, length bucket): for a batch of at most 64 rows and at most 4096
positions that is 7 x 9 = 63 (`graph_bound`), and a short answer's run a handful.
"""

from __future__ import annotations

import torch

from ..model.attention import decode_attention_in_float32, fused_attention
from .kv_cache import keep_rows

# The shortest length bucket: below it a compiled step attends over this many positions.
SMALLEST_LENGTH_BUCKET = 16


def power_of_two_at_least(n: int, smallest: int = 1) -> int:
    return max(smallest, 1 << (n - 1).bit_length())


def graph_bound(batch_size: int, capacity: int) -> int:
    """The most graphs a compiled run of `batch_size` rows and `capacity` positions makes: one
    per (batch size, length bucket), the batch sizes being the first batch's own and the powers
    of two below it it shrinks to, the length buckets the powers of two from
    `SMALLEST_LENGTH_BUCKET` up to the capacity's."""
    batches = (batch_size - 1).bit_length() + 1
    smallest = SMALLEST_LENGTH_BUCKET.bit_length() - 1
    lengths = max(1, (capacity - 1).bit_length() - smallest + 1)
    return batches * lengths


class StepWrite:
    """The cache a decode step's layers see: each row's new key and value go to its own
    `write_at`, and attention spans the first `end` positions under `mask`.

    The new keys are written by indexing the whole cache tensor (layer, row, head, position)
    rather than a layer's view of it: inductor writes such an `index_put_` into a graph input
    in place, while through a view it copied the whole cache every step (a bfloat16
    Qwen3-0.6B step at 124 cached positions took 105 instead of 65 ms compiled)."""

    def __init__(self, keys, values, rows, write_at, end: int, in_float32: bool):
        self.keys, self.values = keys, values
        layers, _, heads = keys.shape[:3]
        device = keys.device
        self.layer_index = torch.arange(layers, device=device)[:, None, None]
        self.index = (rows[:, None], torch.arange(heads, device=device)[None, :],
                      write_at[:, None])
        self.end, self.in_float32 = end, in_float32

    def attend(self, layer: int, q, k, v, mask) -> torch.Tensor:
        index = (self.layer_index[layer], *self.index)
        self.keys.index_put_(index, k[:, :, 0])
        self.values.index_put_(index, v[:, :, 0])
        keys = self.keys[layer, :, :, :self.end]
        values = self.values[layer, :, :, :self.end]
        return fused_attention(q, keys, values, mask, self.in_float32)


def decode_step(model, input_ids, keys, values, key_valid, write_at, rope_pos, end: int,
                masked: bool, in_float32: bool) -> torch.Tensor:
    """One token per row: `input_ids` (rows, 1) -> next-token logits (rows, vocabulary). The
    tensors are updated in place (the new keys and values, their validity, the positions);
    `end`, `masked` and `in_float32` fix the shapes and kernels, so a trace of this function
    replays for every step of the same shape."""
    rows = torch.arange(input_ids.shape[0], device=input_ids.device)
    key_valid[rows, write_at] = True
    mask = key_valid[:, None, None, :end] if masked else None
    cache = StepWrite(keys, values, rows, write_at, end, in_float32)
    hidden = model.layers_over(input_ids, mask, rope_pos[:, None], cache)
    write_at += 1
    rope_pos += 1
    return model.logits_at(hidden)[:, -1]


class DecodeState:
    """The tensors `decode_step` reads and writes, and the host's copy of each row's length.

    `step` feeds one token per row and returns the logits; `keep` drops rows (ascending) that
    leave the batch; `refill` gives a row a new prompt prefix that was prefilled into its slot.
    `stepper` is `decode_step` itself or its compiled form (`compile.Stepper`), which also
    decides the shapes.
    """

    def __init__(self, model, keys, values, key_valid, write_at: list[int], rope_pos, stepper):
        self.model, self.keys, self.values, self.key_valid = model, keys, values, key_valid
        self.lengths = list(write_at)  # host copy of write_at
        device = keys.device
        self.write_at = torch.tensor(write_at, device=device)
        self.rope_pos = rope_pos.to(device=device, dtype=torch.long)
        # Whether some cached position before a row's end is padding (known on the host: once,
        # after the prefill; a slot's prefix and every decoded token are real).
        self.holes = not bool(key_valid[:, :max(self.lengths)].all())
        self.stepper = stepper
        attention = model.model.layers[0].self_attn
        self.in_float32 = device.type == "cpu" and decode_attention_in_float32(
            model.dtype, attention.n_heads, attention.n_kv_heads, attention.head_dim)

    @classmethod
    def after_batch_prefill(cls, model, cache, stepper) -> DecodeState:
        """The state a left-padded prefill into `cache` (`KVCache`) left: every row writes next at
        the shared length; its RoPE position counts its real tokens."""
        rope_pos = cache.key_mask[:, :cache.length].sum(-1)
        if stepper.reads_past_end:  # masked keys must still be numbers: 0 x NaN is NaN
            cache.keys[:, :, :, cache.length:] = 0
            cache.values[:, :, :, cache.length:] = 0
        return cls(model, cache.keys, cache.values, cache.key_mask, [cache.length] * len(rope_pos),
                   rope_pos, stepper)

    @classmethod
    def empty_slots(cls, model, cache, stepper) -> DecodeState:
        """Slots of a `SlotCache` before any prompt: `refill` each before its first step."""
        rows, capacity = cache.keys.shape[1], cache.keys.shape[3]
        key_valid = torch.zeros(rows, capacity, dtype=torch.bool, device=cache.keys.device)
        return cls(model, cache.keys, cache.values, key_valid, [0] * rows,
                   torch.zeros(rows, dtype=torch.long), stepper)

    @property
    def capacity(self) -> int:
        return self.keys.shape[3]

    @property
    def rows(self) -> int:
        return len(self.lengths)

    def refill(self, row: int, length: int) -> None:
        """Slot `row` now holds a prompt prefix of `length` tokens at positions 0.."""
        self.key_valid[row] = False
        self.key_valid[row, :length] = True
        self.write_at[row] = length
        self.rope_pos[row] = length
        self.lengths[row] = length

    def step(self, input_ids: list[int]) -> torch.Tensor:
        """Logits of the next token after each row's `input_ids` entry."""
        if max(self.lengths) >= self.capacity:
            raise ValueError(f"KV cache overflow: {max(self.lengths) + 1} positions > "
                             f"capacity {self.capacity}")
        ids = torch.tensor(input_ids, device=self.keys.device)[:, None]
        logits = self.stepper(self, ids)
        self.lengths = [length + 1 for length in self.lengths]
        return logits

    def eager_step(self, ids: torch.Tensor) -> torch.Tensor:
        """The step at exact shapes: attention over the longest row's keys, masked only where
        a row has padding or is shorter than the longest."""
        end = max(self.lengths) + 1
        masked = self.holes or len(set(self.lengths)) > 1
        return decode_step(self.model, ids, self.keys, self.values, self.key_valid,
                           self.write_at, self.rope_pos, end, masked, self.in_float32)

    def keep(self, rows: list[int]) -> None:
        """Keep only `rows` (ascending), moved in place to the front of the storage: the state's
        tensors stay views at the same addresses, as a captured CUDA graph needs them."""
        self.keys, self.values = keep_rows(self.keys, self.values, rows, max(self.lengths))
        index, kept = torch.tensor(rows, device=self.keys.device), len(rows)
        for name in ("key_valid", "write_at", "rope_pos"):
            tensor = getattr(self, name)
            tensor[:kept] = tensor[index]
            setattr(self, name, tensor[:kept])
        self.lengths = [self.lengths[r] for r in rows]
