"""Which kernel computes a product on which device: the CPU tuning, kept out of the model.

The model (`model.py`) is written as the book's `qwen3.py`: projections are `Linear` layers.
What this module adds only changes speed, never results beyond float rounding:

- `Linear` computes `x @ W.T` as `(W @ x.T).T` on CPU for a few rows, the shape of every batched
  decode step, which torch's CPU BLAS (MKL for float32, oneDNN for bfloat16) runs faster;
- `Linear.pack` keeps a weight only in oneDNN's blocked layout for inference, and
  `pack_side_by_side` fuses q/k/v or gate/up into one packed product;
- `ATTENTION_CALL_COST` prices one attention call on CPU for `kv_cache.row_groups`;
- `PREFILL_CALL_COST` prices one prefill call (a forward pass), per dtype, when
  `generation.prefill_batch` splits a batch's prompts by length.

The thresholds are named settings measured on this project's machine: an Intel Xeon
(Sapphire Rapids) KVM guest with 2 vCPUs, torch 2.13 CPU build, 2 threads, Qwen3-0.6B's shape.
Another CPU may prefer other values; they change speed, not what is computed.
"""

from __future__ import annotations

import functools
import sys

import torch
from torch import nn

# Rows of a product for which `(W @ x.T).T` beats `x @ W.T` here: a decode step at batch 8 took
# 184 instead of 237 ms in float32 and 86 instead of 102 ms in bfloat16; one row and very many
# rows are as fast or faster the usual way.
SMALL_ROW_PRODUCTS = range(4, 257)
# float32 weights are packed from this batch size on: packed products of the layers' projections
# took 89 instead of 117 ms at 8 rows, but 73 instead of 63 ms at one row. bfloat16 always packs
# (40-43 instead of 46-53 ms at 1 to 16 rows).
PACK_FLOAT32_FROM_BATCH = 4
# One attention call on CPU costs about as much as reading this many more key positions (a decode
# step's attention at 16 slots took 39 instead of 59 ms in bfloat16 with rows split by length).
ATTENTION_CALL_COST = 32
# One prefill call (a forward pass) reads every weight once, however few its tokens: it costs
# about as much as this many more prompt tokens (Qwen3-0.6B, batch 1: a call took 71 ms plus
# 0.82 ms a token in bfloat16, 103 ms plus 3.3 ms a token in float32).
PREFILL_CALL_COST = {torch.bfloat16: 87, torch.float16: 87, torch.float32: 31, torch.float64: 31}


@functools.cache
def can_pack(dtype: torch.dtype) -> bool:
    """Whether this CPU can multiply `dtype` weights packed for oneDNN: tried once on a small
    product and checked against the plain one. That the ops exist is not enough: float16 packing
    needs AVX512-FP16 or AVX-NE-CONVERT, and without them it raises instead of running."""
    mkldnn = getattr(torch.ops, "mkldnn", None)
    if not (torch.backends.mkldnn.is_available() and hasattr(mkldnn, "_reorder_linear_weight")
            and hasattr(mkldnn, "_linear_pointwise")):
        return False
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(24, 40, generator=generator).to(dtype)
    x = torch.randn(3, 40, generator=generator).to(dtype)
    try:
        packed = mkldnn._reorder_linear_weight(weight, None)
        out = mkldnn._linear_pointwise(x, packed, None, "none", [], "")
    except RuntimeError:
        return False
    exact = x.double() @ weight.double().T
    plain_error = ((x @ weight.T).double() - exact).abs().max()
    return bool((out.double() - exact).abs().max() <= 4 * plain_error + 1e-6)


def should_pack(device: torch.device, dtype: torch.dtype, batch_size: int) -> bool:
    """Whether packing makes generating `batch_size` rows faster (CPU only), and this CPU can."""
    if device.type != "cpu" or (dtype == torch.float32 and batch_size < PACK_FLOAT32_FROM_BATCH):
        return False
    if not can_pack(dtype):
        print(f"kernels: this CPU or torch build cannot pack {dtype} weights for oneDNN; "
              "using plain weights", file=sys.stderr, flush=True)
        return False
    return True


class Linear(nn.Linear):
    """`nn.Linear` that picks the faster orientation of its product on CPU, and that can keep its
    weight packed for oneDNN (inference only)."""

    packed: torch.Tensor | None = None

    def pack(self) -> None:
        """Keep the weight only in oneDNN's blocked layout (the plain copy is freed)."""
        self.packed = torch.ops.mkldnn._reorder_linear_weight(self.weight.detach(), None)
        self.weight = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is not None:
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
        rows = x.numel() // x.shape[-1]
        if x.device.type != "cpu" or rows not in SMALL_ROW_PRODUCTS:
            return super().forward(x)
        # contiguous: attention's fused CPU kernel needs it
        out = (self.weight @ x.reshape(rows, -1).T).T.contiguous()
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*x.shape[:-1], -1)


def pack_side_by_side(layers: list[Linear]) -> Linear:
    """One packed layer whose output is `layers`' outputs concatenated: one larger product
    runs faster on CPU than several."""
    has_bias = layers[0].bias is not None
    out_features = sum(layer.out_features for layer in layers)
    fused = Linear(layers[0].in_features, out_features, bias=has_bias, device="meta")
    fused.weight = nn.Parameter(torch.cat([layer.weight.detach() for layer in layers]))
    if has_bias:
        fused.bias = nn.Parameter(torch.cat([layer.bias.detach() for layer in layers]))
    fused.pack()
    return fused
