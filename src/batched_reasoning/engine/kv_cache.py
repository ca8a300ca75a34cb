"""Key/value caches allocated once per generation call and written in place.

The model talks to a cache through three calls: `append_mask` (where the new tokens go and which
cached keys are real), `attend` (store one layer's new keys/values and attend over the cached
ones) and `advance` (the new tokens are now cached). Two layouts implement them:

- `KVCache`: one time axis for the whole batch; left padding aligns the rows, so one write
  offset serves them all (the `batched` strategies).
- `SlotCache`: every row has its own length, so a row can be refilled with a new prompt while
  the others keep decoding (the `continuous` strategy); it is only prefilled through this
  protocol, and decoded by `decode.DecodeState`.
"""

from __future__ import annotations

import torch

from ..model.attention import fused_attention


def keep_rows(keys: torch.Tensor, values: torch.Tensor, rows: list[int], filled: int):
    """Move `rows` (ascending) of the (layer, batch, head, position, dim) buffers to the front,
    copying only their `filled` positions, and return the buffers cut to them: a row that
    leaves must not cost a new allocation of the whole capacity."""
    index = torch.tensor(rows, device=keys.device)
    for buffer in (keys, values):
        buffer[:, :len(rows), :, :filled] = buffer[:, index, :, :filled]
    return keys[:, :len(rows)], values[:, :len(rows)]


def _storage(model, batch: int, max_len: int, fill) -> tuple[torch.Tensor, torch.Tensor]:
    cfg = model.cfg
    shape = (cfg.num_hidden_layers, batch, cfg.num_key_value_heads, max_len, cfg.head_dim)
    return (fill(shape, dtype=model.dtype, device=model.device),
            fill(shape, dtype=model.dtype, device=model.device))


class KVCache:
    """Keys and values of every layer for `batch` rows and up to `max_len` positions.

    All rows share one time axis (left padding aligns them), so one write offset serves the
    whole batch; `key_mask` remembers which cached positions hold real tokens. A batch without
    padding needs no mask to decode: every cached key is real and earlier than the new token.
    """

    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        self.keys, self.values = keys, values
        batch, max_len = keys.shape[1], keys.shape[3]
        self.key_mask = torch.zeros(batch, max_len, dtype=torch.bool, device=keys.device)
        self.length = 0
        self.padded = False  # whether any cached position is padding (known on the host)

    @classmethod
    def for_model(cls, model, batch: int, max_len: int) -> KVCache:
        return cls(*_storage(model, batch, max_len, torch.empty))

    @property
    def megabytes(self) -> float:
        """The keys' and values' storage, allocated in full when the cache is made."""
        return (self.keys.nbytes + self.values.nbytes) / 2**20

    @property
    def capacity(self) -> int:
        return self.keys.shape[3]

    def append_mask(self, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Record the new tokens' mask.

        Return the mask over all keys cached so far (batch, keys) and the new tokens' cache
        positions (batch, time), which here are the last `time` columns of every row.
        """
        batch, time = attention_mask.shape
        end = self.length + time
        if end > self.capacity:
            raise ValueError(f"KV cache overflow: {end} positions > capacity {self.capacity}")
        self.key_mask[:, self.length:end] = attention_mask
        if time > 1:  # a prefill; decode steps add one real token per row
            self.padded = self.padded or not bool(attention_mask.all())
        positions = torch.arange(self.length, end, device=attention_mask.device)
        return self.key_mask[:, :end], positions.expand(batch, time)

    def attend(self, layer: int, q, k, v, mask) -> torch.Tensor:
        """Store the new keys/values of `layer`; attend `q` over all cached positions."""
        end = self.length + k.shape[2]
        self.keys[layer, :, :, self.length:end] = k
        self.values[layer, :, :, self.length:end] = v
        keys, values = self.keys[layer, :, :, :end], self.values[layer, :, :, :end]
        if k.shape[2] == 1 and not self.padded:
            mask = None
        return fused_attention(q, keys, values, mask)

    def advance(self, steps: int) -> None:
        self.length += steps

    def rows_from(self, first: int, stop: int, offset: int) -> KVCache:
        """A cache over rows `first .. stop-1` and positions `offset ..` of this one, sharing its
        storage, so a group of similar-length rows prefills into the shared time axis padded
        only to its own longest prompt. Positions before `offset` stay padding for these rows
        (masked, and zeroed: masked garbage would still turn attention's sums into NaN)."""
        view = KVCache.__new__(KVCache)
        view.keys = self.keys[:, first:stop, :, offset:]
        view.values = self.values[:, first:stop, :, offset:]
        view.key_mask = self.key_mask[first:stop, offset:]
        view.length, view.padded = 0, False
        self.keys[:, first:stop, :, :offset] = 0
        self.values[:, first:stop, :, :offset] = 0
        return view

    def prefilled(self, lengths: list[int]) -> None:
        """Rows of these prompt lengths were written by `rows_from` views, right-aligned."""
        self.length = max(lengths)
        self.padded = min(lengths) < self.length

    def share_rows(self, sources: list[int]) -> None:
        """Row `i` becomes a copy of row `sources[i]` (rows that share a prompt prefill it once;
        each keeps its own copy, since their answers diverge from the first new token)."""
        for row, source in enumerate(sources):
            if source != row:  # row by row: a gather would hold all the copies twice
                self.keys[:, row, :, :self.length] = self.keys[:, source, :, :self.length]
                self.values[:, row, :, :self.length] = self.values[:, source, :, :self.length]
                self.key_mask[row] = self.key_mask[source]

    def keep_rows(self, rows: list[int]) -> None:
        """Drop every row not in `rows` (ascending): finished sequences leave the compute batch."""
        self.keys, self.values = keep_rows(self.keys, self.values, rows, self.length)
        self.key_mask = self.key_mask[rows]


class SlotCache:
    """Keys and values for `batch` slots, each holding one sequence of its own length.

    Row `r` holds real tokens at positions `0 .. length - 1` and nothing after them that a
    step reads unmasked: a prompt is prefilled into its slot from empty (`prefill`), decoding
    (`decode.DecodeState`) writes each row at its own length, and attention masks every key
    past a row's end. The storage starts zeroed: a masked key must still be a finite number,
    since a masked-out NaN value would poison the attention sum.
    """

    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        self.keys, self.values = keys, values

    @classmethod
    def for_model(cls, model, batch: int, max_len: int) -> SlotCache:
        return cls(*_storage(model, batch, max_len, torch.zeros))

    megabytes = KVCache.megabytes

    @property
    def capacity(self) -> int:
        return self.keys.shape[3]

    def prefill(self, rows: list[int]) -> SlotPrefill:
        """A cache for one right-padded prefill of slots `rows` from empty: each prompt lands at
        positions 0.. of its own slot, where decoding expects it, with no second buffer to
        hold and copy from. Then the slots' prefixes are set (`copy_prefix` for shared ones)."""
        return SlotPrefill(self, rows)

    def copy_prefix(self, row: int, length: int, source: int) -> None:
        """Slot `row` gets the first `length` positions of slot `source` (the same prefix)."""
        self.keys[:, row, :, :length] = self.keys[:, source, :, :length]
        self.values[:, row, :, :length] = self.values[:, source, :, :length]


class SlotPrefill:
    """Slots of a `SlotCache` prefilled together from empty, right-padded: attention runs over
    the new keys alone (causal, padding masked) and they are stored at positions 0.. of each
    slot; the padding's keys land past a slot's length, where decoding overwrites them."""

    def __init__(self, cache: SlotCache, rows: list[int]):
        self.cache = cache
        self.rows = torch.tensor(rows, device=cache.keys.device)

    def append_mask(self, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        batch, time = attention_mask.shape
        if time > self.cache.capacity:
            raise ValueError(f"KV cache overflow: {time} positions > capacity {self.cache.capacity}")
        return attention_mask, torch.arange(time, device=attention_mask.device).expand(batch, time)

    def attend(self, layer: int, q, k, v, mask) -> torch.Tensor:
        time = k.shape[2]
        self.cache.keys[layer, :, :, :time].index_copy_(0, self.rows, k)
        self.cache.values[layer, :, :, :time].index_copy_(0, self.rows, v)
        return fused_attention(q, k, v, mask)

    def advance(self, steps: int) -> None:
        pass
