"""Which kernel computes a product on which device: the CPU tuning, kept out of the model.

The model (`model/qwen3.py`) is written as the book's `qwen3.py`: projections are `Linear` layers.
What this module adds only changes speed, never results beyond float rounding:

- `Linear` computes `x @ W.T` as `(W @ x.T).T` on CPU for a few rows, the shape of every batched
  decode step, which torch's CPU BLAS (MKL for float32, oneDNN for bfloat16) runs faster;
- `Linear.pack` keeps a weight only in oneDNN's blocked layout for inference, and
  `pack_side_by_side` fuses q/k/v or gate/up into one packed product;
- `pack_from_rows` says from how many rows packing pays on this CPU, per dtype and layer
  shape: timed once and kept (`calibration`), since a CPU without AMX or AVX-512 may differ;
- `PREFILL_CALL_COST` prices one prefill call (a forward pass) per dtype where it is not timed
  (off the CPU), when `generation.prefill_batch` splits a batch's prompts by length.
"""

from __future__ import annotations

import functools
import math
import sys

import torch
from torch import nn

from ..core import calibration

# Rows of a product for which `(W @ x.T).T` beats `x @ W.T` here: a decode step at batch 8 took
# 184 instead of 237 ms in float32 and 86 instead of 102 ms in bfloat16; one row and very many
# rows are as fast or faster the usual way.
SMALL_ROW_PRODUCTS = range(4, 257)
# Rows at which packed and plain products are timed against each other (`pack_from_rows`).
PACK_ROWS = (1, 2, 4, 8, 16)
# Weights the packing timing cycles through, at most: more than a CPU's last-level cache, as a
# real model's are, so the timing reads memory as decoding does.
PACK_TIMING_MB = 128
# One prefill call (a forward pass) reads every weight once, however few its tokens: it costs
# about as much as this many more prompt tokens (Qwen3-0.6B on this project's Xeon, batch 1: a
# call took 71 ms plus 0.82 ms a token in bfloat16, 103 ms plus 3.3 ms a token in float32).
# On CPU the cost is timed instead (`generation.prefill_call_cost`).
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
        packed = packed_weight(weight)
        out = mkldnn._linear_pointwise(x, packed, None, "none", [], "")
    except RuntimeError:
        return False
    exact = x.double() @ weight.double().T
    plain_error = ((x @ weight.T).double() - exact).abs().max()
    return bool((out.double() - exact).abs().max() <= 4 * plain_error + 1e-6)


def should_pack(device: torch.device, dtype: torch.dtype, batch_size: int,
                layer_shape: tuple[int, int, int, int], layers: int) -> bool:
    """Whether packing makes generating `batch_size` rows faster (CPU only), and this CPU can.
    `layer_shape` is (hidden, query width, key/value width, intermediate) of `layers` layers."""
    if device.type != "cpu":
        return False
    if not can_pack(dtype):
        print(f"kernels: this CPU or torch build cannot pack {dtype} weights for oneDNN; "
              "using plain weights", file=sys.stderr, flush=True)
        return False
    pack_from = pack_from_rows(dtype, layer_shape, layers)
    return pack_from is not None and batch_size >= pack_from


def first_faster(plain_ms: dict[int, float], packed_ms: dict[int, float]) -> int | None:
    """The fewest rows from which packed products are faster than plain ones at every row
    count timed; None if they are not faster even at the most rows."""
    pack_from = None
    for rows in sorted(plain_ms, reverse=True):
        if packed_ms[rows] >= plain_ms[rows]:
            break
        pack_from = rows
    return pack_from


def pack_from_rows(dtype: torch.dtype, layer_shape: tuple[int, int, int, int],
                   layers: int) -> int | None:
    """From how many rows one decoder layer's projections run faster packed (q/k/v and
    gate/up side by side, as `Qwen3.pack_for_inference` packs them) than plain, on this CPU:
    `first_faster` of both timed at `PACK_ROWS`, once per machine (`calibration`). The timing
    cycles through copies of the layer's random weights, up to the model's `layers` and
    `PACK_TIMING_MB`, so that, as in decoding, products read their weights from memory."""
    hidden, q_width, kv_width, intermediate = layer_shape
    name = f"pack_from_rows/{str(dtype).removeprefix('torch.')}/{'x'.join(map(str, layer_shape))}"

    def measure() -> dict:
        generator = torch.Generator().manual_seed(0)

        def linear(width_in: int, width_out: int) -> Linear:
            layer = Linear(width_in, width_out, bias=False, device="meta")
            layer.weight = nn.Parameter(torch.randn(width_out, width_in, generator=generator)
                                        .to(dtype) / math.sqrt(width_in), requires_grad=False)
            return layer

        layer_mb = (hidden * (q_width + 2 * kv_width) + q_width * hidden
                    + 3 * hidden * intermediate) * dtype.itemsize / 2**20
        copies = max(1, min(layers, math.ceil(PACK_TIMING_MB / layer_mb)))
        plain, packed = [], []
        for _ in range(copies):
            q, k, v, o = (linear(hidden, q_width), linear(hidden, kv_width),
                          linear(hidden, kv_width), linear(q_width, hidden))
            gate, up, down = (linear(hidden, intermediate), linear(hidden, intermediate),
                              linear(intermediate, hidden))
            plain.append(((q, k, v, gate, up), o, down))
            packed_o, packed_down = linear(q_width, hidden), linear(intermediate, hidden)
            packed_o.weight, packed_down.weight = o.weight, down.weight
            packed_o.pack(), packed_down.pack()
            packed.append(((pack_side_by_side([q, k, v]), pack_side_by_side([gate, up])),
                           packed_o, packed_down))

        def products(layer_set, rows: int):
            x = torch.randn(rows, 1, hidden, generator=generator).to(dtype)
            attended = torch.randn(rows, 1, q_width, generator=generator).to(dtype)
            gated = torch.randn(rows, 1, intermediate, generator=generator).to(dtype)

            def run() -> None:
                for from_hidden, o, down in layer_set:
                    for layer in from_hidden:
                        layer(x)
                    o(attended)
                    down(gated)
            return run

        with torch.inference_mode():
            ms = calibration.median_ms(
                {f"{kind}/{rows}": products(layer_set, rows)
                 for rows in PACK_ROWS for kind, layer_set in (("plain", plain), ("packed", packed))},
                repeats=7)
        plain_ms = {rows: ms[f"plain/{rows}"] for rows in PACK_ROWS}
        packed_ms = {rows: ms[f"packed/{rows}"] for rows in PACK_ROWS}
        return {"choice": first_faster(plain_ms, packed_ms), "layer_copies": copies,
                "plain_ms": {str(r): round(t, 4) for r, t in plain_ms.items()},
                "packed_ms": {str(r): round(t, 4) for r, t in packed_ms.items()}}

    return calibration.choose(name, measure)["choice"]


def packed_weight(weight: torch.Tensor) -> torch.Tensor:
    """`weight` (out, in) reordered into oneDNN's blocked layout for `Linear`'s product."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)


class Linear(nn.Linear):
    """`nn.Linear` that picks the faster orientation of its product on CPU, and that can keep its
    weight packed for oneDNN (inference only)."""

    packed: torch.Tensor | None = None

    def pack(self) -> None:
        """Keep the weight only in oneDNN's blocked layout (the plain copy is freed)."""
        self.packed = packed_weight(self.weight)
        self.weight = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is not None:
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
        rows = x.numel() // x.shape[-1]
        small = SMALL_ROW_PRODUCTS.start <= rows < SMALL_ROW_PRODUCTS.stop  # (traceable)
        if x.device.type != "cpu" or not small:
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
