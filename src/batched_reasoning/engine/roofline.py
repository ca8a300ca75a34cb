"""A decode step's roofline bound: the least time its bytes and FLOPs can take on a machine
(`core.machine.MachineLimits`).

A decode step reads every projection's weights once, whatever the batch, plus each row's cached
keys and values; it multiplies 2 FLOPs per weight per row, plus attention over the cache. It can
finish no sooner than the slower of reading those bytes at the machine's read bandwidth and
doing those FLOPs at its matrix throughput.
"""

from __future__ import annotations

from ..core.machine import MachineLimits
from ..model.config import Qwen3Config
from .memory_model import DTYPE_BYTES, parameter_count


def decode_step_work(cfg: Qwen3Config, dtype: str, batch: int, context: int) -> tuple[float, float]:
    """(bytes read, FLOPs) of one decode step: `batch` rows, each attending to `context` cached
    positions. The input embedding is only looked up (a row per token), so an untied one is
    not read; a tied one is read as the output projection."""
    weights = parameter_count(cfg) - (0 if cfg.tie_word_embeddings else cfg.vocab_size * cfg.hidden_size)
    cache_values = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * context
    read = (weights + batch * cache_values) * DTYPE_BYTES[dtype]
    attention = 4 * cfg.num_hidden_layers * cfg.num_attention_heads * cfg.head_dim * context
    return read, batch * (2 * weights + attention)


def bound_seconds(cfg: Qwen3Config, dtype: str, batch: int, context: int,
                  limits: MachineLimits) -> float:
    read, flops = decode_step_work(cfg, dtype, batch, context)
    return max(read / (limits.read_gb_s * 1e9), flops / (limits.matmul_gflop_s * 1e9))


def bound_tokens_per_s(cfg: Qwen3Config, dtype: str, batch: int, context: int,
                       limits: MachineLimits) -> tuple[float, str]:
    """The most tokens/s decode steps of `batch` rows could reach, and what bounds them
    (`bandwidth` or `compute`)."""
    read, flops = decode_step_work(cfg, dtype, batch, context)
    read_s, flop_s = read / (limits.read_gb_s * 1e9), flops / (limits.matmul_gflop_s * 1e9)
    return batch / max(read_s, flop_s), "bandwidth" if read_s >= flop_s else "compute"
