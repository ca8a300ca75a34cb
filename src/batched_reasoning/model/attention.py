"""Attention kernels for a few query tokens over cached keys, and which runs faster on this
CPU: the model, the caches and the decode step call `fused_attention`."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..core import calibration

# Cached positions of the timed decode step (`decode_attention_in_float32`): a short answer's.
DECODE_CONTEXT = 128


def fused_attention(q, k, v, mask, in_float32: bool = False):
    """Fused attention in which grouped key/value heads are shared, never copied per query head.

    On CPU, `enable_gqa` lets the fused kernel read each key/value head once for its group. On a
    GPU the flash and memory-efficient kernels do not take `enable_gqa` with a mask, and PyTorch
    would fall back to its math kernel, which copies keys and values for every query head over
    the whole cache, every layer, every step; there the group's query heads are folded into the
    query length instead (`folded_attention`), which the fast kernels take. `in_float32` runs a
    CPU call over a half-precision cache in float32: decode steps do where that was measured
    faster on this machine (`decode_attention_in_float32`, resolved once per generation call).
    """
    if q.device.type == "cpu":
        gqa = q.shape[1] != k.shape[1]
        if in_float32:
            return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask,
                                                  enable_gqa=gqa).to(q.dtype)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
    if q.shape[1] == k.shape[1]:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return folded_attention(q, k, v, mask)


def folded_attention(q, k, v, mask):
    """Grouped-query attention as plain attention: the query heads that share a key/value head
    (heads `j*g .. j*g + g-1` use head `j`) become `g` times as many queries of that head; the
    mask, if any, is repeated for them. Only the queries are rearranged."""
    batch, heads, time, dim = q.shape
    kv_heads = k.shape[1]
    groups = heads // kv_heads
    folded = q.reshape(batch, kv_heads, groups * time, dim)
    if mask is not None:
        mask = mask.expand(batch, 1, time, mask.shape[-1]).repeat(1, 1, groups, 1)
    out = F.scaled_dot_product_attention(folded, k, v, attn_mask=mask)
    return out.reshape(batch, heads, time, dim)


def decode_attention_in_float32(dtype: torch.dtype, heads: int, kv_heads: int,
                                head_dim: int) -> bool:
    """Whether one decode query's CPU attention over a half-precision cache runs faster with
    queries, keys and values converted to float32 (which only rounds less). Timed once per
    dtype and head shape at 4 rows of `DECODE_CONTEXT` cached positions."""
    if dtype not in (torch.bfloat16, torch.float16):
        return False
    name = f"decode_attention/{str(dtype).removeprefix('torch.')}/{heads}x{kv_heads}x{head_dim}"

    def measure() -> dict:
        generator = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(4, h, t, head_dim, generator=generator).to(dtype)
                   for h, t in ((heads, 1), (kv_heads, DECODE_CONTEXT), (kv_heads, DECODE_CONTEXT)))
        mask = torch.ones(4, 1, 1, DECODE_CONTEXT, dtype=torch.bool)
        mask[0, ..., : DECODE_CONTEXT // 4] = False  # a left-padded row
        gqa = heads != kv_heads
        ms = calibration.median_ms({
            "native": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                             enable_gqa=gqa),
            "float32": lambda: F.scaled_dot_product_attention(
                q.float(), k.float(), v.float(), attn_mask=mask, enable_gqa=gqa).to(dtype)})
        return {"choice": min(ms, key=ms.get)} | {f"{name}_ms": round(t, 4)
                                                   for name, t in ms.items()}

    return calibration.choose(name, measure)["choice"] == "float32"
