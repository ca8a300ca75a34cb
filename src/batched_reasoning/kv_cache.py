"""A key/value cache allocated once per generation call and written in place."""

from __future__ import annotations

import torch


class KVCache:
    """Keys and values of every layer for `batch` rows and up to `max_len` positions.

    All rows share one time axis (left padding aligns them), so one write offset serves the
    whole batch; `key_mask` remembers which cached positions hold real tokens.
    """

    def __init__(self, n_layers, batch, n_kv_heads, max_len, head_dim, dtype, device):
        shape = (n_layers, batch, n_kv_heads, max_len, head_dim)
        self.keys = torch.empty(shape, dtype=dtype, device=device)
        self.values = torch.empty(shape, dtype=dtype, device=device)
        self.key_mask = torch.zeros(batch, max_len, dtype=torch.bool, device=device)
        self.length = 0

    @classmethod
    def for_model(cls, model, batch: int, max_len: int) -> "KVCache":
        cfg = model.cfg
        return cls(
            cfg.num_hidden_layers, batch, cfg.num_key_value_heads, max_len, cfg.head_dim,
            model.dtype, model.device,
        )

    @property
    def capacity(self) -> int:
        return self.keys.shape[3]

    def append_mask(self, attention_mask: torch.Tensor) -> torch.Tensor:
        """Record the new tokens' mask; return the mask over all keys seen so far."""
        end = self.length + attention_mask.shape[1]
        if end > self.capacity:
            raise ValueError(f"KV cache overflow: {end} positions > capacity {self.capacity}")
        self.key_mask[:, self.length:end] = attention_mask
        return self.key_mask[:, :end]

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        """Store the new keys/values of `layer`; return the keys/values of all cached positions."""
        end = self.length + k.shape[2]
        self.keys[layer, :, :, self.length:end] = k
        self.values[layer, :, :, self.length:end] = v
        return self.keys[layer, :, :, :end], self.values[layer, :, :, :end]

    def advance(self, steps: int) -> None:
        self.length += steps

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Drop every row not in `rows` (finished sequences leave the compute batch)."""
        self.keys = self.keys[:, rows]
        self.values = self.values[:, rows]
        self.key_mask = self.key_mask[rows]
