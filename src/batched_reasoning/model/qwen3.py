"""A Qwen3 decoder in plain PyTorch.

Module names mirror Hugging Face's (`model.layers.0.self_attn.q_proj`, ...), so a checkpoint's
state dict loads without renaming. The forward pass is padding-aware: a boolean attention mask
(True = real token) hides padded keys, and position ids count only each row's real tokens.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from . import kernels
from .attention import fused_attention
from .config import Qwen3Config
from .kernels import Linear

if TYPE_CHECKING:  # the model is handed a cache; it never makes one
    from ..engine.kv_cache import KVCache, SlotCache


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Root-mean-square norm over the last dimension, computed in float32 at least (float64
    stays float64), then scaled by `weight`."""
    dtype = x.dtype
    x = x.to(torch.promote_types(dtype, torch.float32))
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(dtype)


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


def rotary_tables(positions: int, head_dim: int, theta: float, dtype: torch.dtype, device):
    """cos/sin of every position `0 .. positions-1` (positions, head_dim), in `dtype`: computed
    once and indexed by position, rather than once per forward pass (a decode step's dozen
    small kernels). Entry p is exactly what computing it for position p alone gives."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim))
    angles = torch.arange(positions, device=device).float()[:, None] * inv_freq
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    """Grouped-query attention with per-head RMSNorm on queries and keys."""

    def __init__(self, cfg: Qwen3Config):
        super().__init__()
        self.n_heads = cfg.num_attention_heads
        self.n_kv_heads = cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        bias = cfg.attention_bias
        self.q_proj = Linear(cfg.hidden_size, self.n_heads * self.head_dim, bias=bias)
        self.k_proj = Linear(cfg.hidden_size, self.n_kv_heads * self.head_dim, bias=bias)
        self.v_proj = Linear(cfg.hidden_size, self.n_kv_heads * self.head_dim, bias=bias)
        self.o_proj = Linear(self.n_heads * self.head_dim, cfg.hidden_size, bias=bias)
        self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.qkv_proj: Linear | None = None  # q, k and v packed side by side for inference
        # The q- and k-norm weights side by side, fixed while a generation call runs
        # (`Qwen3.decoding`); training concatenates them anew each pass, as they change.
        self.fixed_qk_norm: torch.Tensor | None = None
        self._last_fixed_qk_norm: torch.Tensor | None = None

    def fix_qk_norm(self) -> None:
        """Set `fixed_qk_norm` for a generation call: the same tensor as the last call's while
        the weights hold the same values, so a compiled step that keeps it as a constant
        (inductor's freezing guards on its identity) is not traced anew for every call."""
        self.fixed_qk_norm = None
        weight = self.qk_norm_weight().detach()
        last = self._last_fixed_qk_norm
        if last is None or last.dtype != weight.dtype or last.device != weight.device \
                or not torch.equal(last, weight):
            self._last_fixed_qk_norm = weight
        self.fixed_qk_norm = self._last_fixed_qk_norm

    def qk_norm_weight(self) -> torch.Tensor:
        if self.fixed_qk_norm is not None:
            return self.fixed_qk_norm
        return torch.cat([self.q_norm.weight.expand(self.n_heads, -1),
                          self.k_norm.weight.expand(self.n_kv_heads, -1)])

    def pack(self) -> None:
        self.qkv_proj = kernels.pack_side_by_side([self.q_proj, self.k_proj, self.v_proj])
        del self.q_proj, self.k_proj, self.v_proj
        self.o_proj.pack()

    def forward(self, x, cos, sin, mask, cache: KVCache | SlotCache | None, layer: int):
        batch, time, _ = x.shape
        heads, qk_size = self.n_heads + self.n_kv_heads, (self.n_heads + self.n_kv_heads) * self.head_dim
        if self.qkv_proj is None:
            qk, v = torch.cat([self.q_proj(x), self.k_proj(x)], -1), self.v_proj(x)
        else:
            qk, v = self.qkv_proj(x).split([qk_size, self.n_kv_heads * self.head_dim], -1)
        # Query and key heads are normed (each with its own weight) and rotated alike, so they
        # go through one norm and one rotation together: half the small kernels of a decode step.
        qk = rms_norm(qk.view(batch, time, heads, self.head_dim), self.qk_norm_weight(),
                      self.q_norm.eps)
        q, k = apply_rotary(qk.transpose(1, 2), cos, sin).split([self.n_heads, self.n_kv_heads], 1)
        v = v.view(batch, time, self.n_kv_heads, self.head_dim).transpose(1, 2)
        if cache is None:
            out = fused_attention(q, k, v, mask)
        else:
            out = cache.attend(layer, q, k, v, mask)
        return self.o_proj(out.transpose(1, 2).reshape(batch, time, -1))


class MLP(nn.Module):
    """SwiGLU feed-forward."""

    def __init__(self, cfg: Qwen3Config):
        super().__init__()
        self.gate_proj = Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)
        self.gate_up_proj: Linear | None = None  # packed side by side for inference

    def pack(self) -> None:
        self.gate_up_proj = kernels.pack_side_by_side([self.gate_proj, self.up_proj])
        del self.gate_proj, self.up_proj
        self.down_proj.pack()

    def forward(self, x):
        if self.gate_up_proj is None:
            gate, up = self.gate_proj(x), self.up_proj(x)
        else:
            gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: Qwen3Config):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, mask, cache, layer):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache, layer)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    def __init__(self, cfg: Qwen3Config):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


def attention_mask_4d(key_mask: torch.Tensor, query_pos: torch.Tensor) -> torch.Tensor:
    """(batch, keys) validity and the queries' key positions (batch, queries) -> causal mask
    (batch, 1, queries, keys).

    A padded query position has no valid key before it; letting it see itself keeps softmax
    finite, and nothing real ever attends to it.
    """
    key_pos = torch.arange(key_mask.shape[1], device=key_mask.device)
    query_pos = query_pos[:, None, :, None]
    causal = key_pos <= query_pos
    return (causal & key_mask[:, None, None, :]) | (key_pos == query_pos)


def packed_mask_and_positions(segment_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows that hold several examples one after another (`segment_ids` (batch, time): equal,
    contiguous ids for one example's tokens) -> the causal mask (batch, 1, time, time) in which a
    token attends only to its own example, and each token's position within its example. Each
    example then computes exactly what it would alone, with no padding between examples."""
    time = segment_ids.shape[1]
    index = torch.arange(time, device=segment_ids.device)
    causal = index[None, :] <= index[:, None]
    mask = (segment_ids[:, :, None] == segment_ids[:, None, :]) & causal
    starts = torch.ones_like(segment_ids, dtype=torch.bool)
    starts[:, 1:] = segment_ids[:, 1:] != segment_ids[:, :-1]
    first = torch.cummax(torch.where(starts, index, 0), dim=1).values
    return mask[:, None], index - first


class Qwen3(nn.Module):
    # Set by `pack_for_inference`: the weights no longer change (no training follows).
    inference_only = False

    def __init__(self, cfg: Qwen3Config):
        super().__init__()
        self.cfg = cfg
        self.model = Backbone(cfg)
        self.lm_head = Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def rotary(self, positions: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """The RoPE tables (`rotary_tables`) for at least `positions` positions, made once and
        grown when a longer sequence comes."""
        tables = getattr(self, "_rotary", None)
        if tables is None or len(tables[0]) < positions or tables[0].dtype != dtype \
                or tables[0].device != self.device:
            tables = rotary_tables(max(positions, 256), self.cfg.head_dim, self.cfg.rope_theta,
                                   dtype, self.device)
            self._rotary = tables
        return tables

    @contextmanager
    def decoding(self, positions: int):
        """What every decode step reads and no step changes, made once for a generation call:
        RoPE tables for `positions` positions and each layer's q/k-norm weights side by side."""
        self.rotary(positions, self.dtype)
        attentions = [layer.self_attn for layer in self.model.layers]
        for attention in attentions:
            attention.fix_qk_norm()
        try:
            yield
        finally:
            for attention in attentions:
                attention.fixed_qk_norm = None

    @property
    def device(self) -> torch.device:
        return self.model.embed_tokens.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.model.embed_tokens.weight.dtype

    @property
    def packed(self) -> bool:
        return any(m.packed is not None for m in self.modules() if isinstance(m, Linear))

    def pack_for_inference(self, batch_size: int) -> bool:
        """Store the projections' weights packed for the CPU's matrix kernels when that makes
        generating `batch_size` rows faster (`kernels.should_pack`); returns whether the model
        is packed. q/k/v and gate/up each become one product; the plain weights are freed, so
        memory stays the same, except that a tied output layer gets a packed copy of the
        embedding's weight (the lookup needs it plain): one copy made here, where inductor's own
        packing made one per compiled graph (`compiled.CPU_OPTIONS`).
        One-way: a packed model can generate but not train or be saved; reload it for that.
        Packed or not, the model is then `inference_only`: its compiled steps may hold the
        weights as constants (`compiled.CPU_OPTIONS`).
        """
        self.inference_only = True
        if self.packed:
            return True
        attention, cfg = self.model.layers[0].self_attn, self.cfg
        layer_shape = (cfg.hidden_size, attention.n_heads * attention.head_dim,
                       attention.n_kv_heads * attention.head_dim, cfg.intermediate_size)
        if not kernels.should_pack(self.device, self.dtype, batch_size, layer_shape,
                                   len(self.model.layers)):
            return False
        for layer in self.model.layers:
            layer.self_attn.pack()
            layer.mlp.pack()
        if self.lm_head.weight is self.model.embed_tokens.weight:
            self.lm_head.packed = kernels.packed_weight(self.lm_head.weight)
        else:
            self.lm_head.pack()
        return True

    def train(self, mode: bool = True):
        if mode and self.packed:
            raise RuntimeError("this model's weights are packed for inference; reload it to train")
        return super().train(mode)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        cache: KVCache | SlotCache | None = None,
        last_only: bool = False,
    ) -> torch.Tensor:
        """Logits for `input_ids` (batch, time).

        Without a cache this is a full causal pass (training, scoring). With one, the new tokens'
        keys and values are written into it, at positions the cache chooses (after the shared
        end of a left-padded batch, or after each row's own end), and attention spans
        everything cached so far.
        `last_only` projects to the vocabulary at the final position only: prefill needs no more,
        and the vocabulary projection over every prompt position is the largest tensor of all.
        """
        x = self.hidden_states(input_ids, attention_mask, position_ids, cache)
        if last_only:
            x = x[:, -1:]
        return self.logits_at(x)

    def hidden_states(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        cache: KVCache | SlotCache | None = None,
        segment_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The last layer's output, before the final norm and the vocabulary projection: all a
        prefill whose logits nobody reads needs to run (its cache is then filled), and what a
        loss over a few positions projects only there. `segment_ids` marks packed examples
        (`packed_mask_and_positions`), for training without a cache."""
        batch, time = input_ids.shape
        if segment_ids is not None:
            mask, position_ids = packed_mask_and_positions(segment_ids)
            self.rotary(time, self.dtype)
            return self.layers_over(input_ids, mask, position_ids, None)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids, dtype=torch.bool)
        if cache is not None:
            key_mask, query_pos = cache.append_mask(attention_mask)
        else:
            key_mask = attention_mask
            query_pos = torch.arange(time, device=input_ids.device).expand(batch, time)
        if position_ids is None:  # the number of real tokens before each new one
            position_ids = (key_mask.cumsum(-1) - 1).clamp(min=0).gather(1, query_pos)
        self.rotary(key_mask.shape[1], self.dtype)  # positions count keys, never beyond them
        x = self.layers_over(input_ids, attention_mask_4d(key_mask, query_pos), position_ids, cache)
        if cache is not None:
            cache.advance(time)
        return x

    def layers_over(self, input_ids, mask, position_ids, cache) -> torch.Tensor:
        """The decoder layers over `input_ids` at `position_ids` (both (batch, time)); the RoPE
        tables must already reach every position (`rotary`)."""
        x = self.model.embed_tokens(input_ids)
        cos_table, sin_table = self._rotary
        cos, sin = cos_table[position_ids][:, None], sin_table[position_ids][:, None]
        for index, layer in enumerate(self.model.layers):
            x = layer(x, cos, sin, mask, cache, index)
        return x

    def logits_at(self, hidden: torch.Tensor) -> torch.Tensor:
        """The vocabulary logits of hidden states (any leading shape)."""
        return self.lm_head(self.model.norm(hidden))
