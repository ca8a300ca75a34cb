"""Where a decode step's time goes: what this machine can do (read bandwidth, matrix
throughput), the least time a step of a given shape, batch and context could take on it (its
roofline bound), and a profile of a real step by kind of work.

A decode step reads every projection's weights once, whatever the batch, plus each row's cached
keys and values; it multiplies 2 FLOPs per weight per row, plus attention over the cache. It can
finish no sooner than the slower of reading those bytes at the machine's read bandwidth and
doing those FLOPs at its matrix throughput. The step's measured time over that bound says how
much of the machine the implementation uses.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import torch

from ..model.config import Qwen3Config
from ..core.devices import synchronize
from ..engine.generation import Greedy
from ..engine.kv_cache import KVCache
from ..model.memory_model import DTYPE_BYTES, parameter_count

KINDS = ("matmul", "attention", "elementwise", "sampling", "host")


@dataclass
class MachineLimits:
    read_gb_s: float  # sustained read bandwidth (a sum over a tensor far larger than the caches)
    matmul_gflop_s: float  # a square product: the faster of the benchmark's dtype and float32
    matmul_dtype: str = "float32"  # which of the two that was

    def as_dict(self) -> dict:
        return asdict(self)


def _best_seconds(work, device: torch.device, repeats: int) -> float:
    work()  # warm-up: thread pools, page faults
    best = float("inf")
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        work()
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return best


# The longest one timed product may take, and the product that first estimates the rate.
PRODUCT_SECONDS = 0.25
PROBE_SIZE = 256


def timed_size(size: int, estimated_gflop_s: float, seconds: float = PRODUCT_SECONDS) -> int:
    """The side of the product to time: `size`, or smaller if a product of it would take over
    `seconds` at the estimated rate (never under `PROBE_SIZE`, nor over `size`)."""
    fits = int((estimated_gflop_s * 1e9 * seconds / 2) ** (1 / 3))
    return min(size, max(fits, PROBE_SIZE))


def product_gflop_s(device: torch.device, dtype: torch.dtype, size: int, repeats: int) -> float:
    """The rate of a square product of side `size` in `dtype`, the best of `repeats`. A
    `PROBE_SIZE` product estimates the rate first, and a dtype too slow for `size` is timed
    smaller (`timed_size`): bfloat16 without a native kernel (an AVX2 CPU) multiplies at
    ~0.05 GFLOP/s, where a 2048² product takes minutes."""
    def rate(side: int, repeats: int) -> float:
        a = torch.randn(side, side, device=device).to(dtype)
        b = torch.randn(side, side, device=device).to(dtype)
        return 2 * side**3 / _best_seconds(lambda: a @ b, device, repeats) / 1e9

    return rate(timed_size(size, rate(min(size, PROBE_SIZE), 1)), repeats)


def measure_machine(device: torch.device, dtype: torch.dtype, read_mb: int = 512,
                    matmul_size: int = 2048, repeats: int = 5) -> MachineLimits:
    """A STREAM-like read (sum of `read_mb` MB of float32) and a `matmul_size`² product, each
    the best of `repeats` (a second or two on a laptop CPU). The product's rate is the faster of
    `dtype`'s and float32's: any product can run in float32, so a dtype whose kernel is slower
    (bfloat16 on a CPU without AVX512-BF16 took seconds here) does not lower the machine's
    limit, and the bound keeps telling how far the step is from what the machine can do."""
    data = torch.ones(read_mb * 2**20 // 4, dtype=torch.float32, device=device)
    read_s = _best_seconds(lambda: data.sum(), device, repeats)
    rates = {str(d).removeprefix("torch."): product_gflop_s(device, d, matmul_size, repeats)
             for d in dict.fromkeys([dtype, torch.float32])}
    fastest = max(rates, key=rates.get)
    return MachineLimits(read_gb_s=data.nbytes / read_s / 1e9, matmul_gflop_s=rates[fastest],
                         matmul_dtype=fastest)


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


def kind_of(op: str) -> str:
    """The kind of work a profiled operator does (a decode step has no other products)."""
    if "scaled_dot_product" in op or "attention" in op:
        return "attention"
    if "linear" in op or op in ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul"):
        return "matmul"
    if op in ("aten::argmax", "aten::max", "aten::topk", "aten::sort", "aten::multinomial",
              "aten::cumsum"):
        return "sampling"
    return "elementwise"  # norms, RoPE, residual adds, activations, copies into the cache


def _decode_steps(model, cache: KVCache, tokens: torch.Tensor, steps: int) -> torch.Tensor:
    for _ in range(steps):
        logits = model(tokens, torch.ones_like(tokens, dtype=torch.bool), cache=cache)[:, -1]
        tokens = Greedy()(logits, [])[:, None]  # the pick of every real greedy step
    synchronize(model.device)
    return tokens


@torch.inference_mode()
def profile_decode_step(model, batch: int, context: int, steps: int = 8, seed: int = 0) -> dict:
    """Time `steps` decode steps of `batch` rows at about `context` cached positions (random
    prompt tokens, no padding), then profile as many more; milliseconds per step, in all and by
    kind. `host` is the profiled step's wall time that no operator accounts for (Python,
    the loop's bookkeeping, launching)."""
    generator = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, model.cfg.vocab_size, (batch, context), generator=generator)
    cache = KVCache.for_model(model, batch, context + 2 * steps + 1)
    prompt = prompt.to(model.device)
    logits = model(prompt, torch.ones_like(prompt, dtype=torch.bool), cache=cache, last_only=True)
    tokens = _decode_steps(model, cache, logits[:, -1].argmax(-1, keepdim=True), 1)  # warm-up
    start = time.perf_counter()
    tokens = _decode_steps(model, cache, tokens, steps)
    step_s = (time.perf_counter() - start) / steps
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        start = time.perf_counter()
        _decode_steps(model, cache, tokens, steps)
        profiled_s = time.perf_counter() - start
    kinds = dict.fromkeys(KINDS, 0.0)
    for event in profiler.key_averages():
        kinds[kind_of(event.key)] += event.self_cpu_time_total / 1e6
    kinds["host"] = max(profiled_s - sum(kinds.values()), 0.0)
    return {"step_ms": 1e3 * step_s, "profiled_step_ms": 1e3 * profiled_s / steps,
            **{f"{kind}_ms": 1e3 * seconds / steps for kind, seconds in kinds.items()}}


def decode_table(model, batch_sizes, context: int, limits: MachineLimits, dtype: str) -> list[dict]:
    """One row per batch size: the measured decode step against its roofline bound, and where
    the (profiled) step's time went."""
    rows = []
    for batch in sorted(batch_sizes):
        model.pack_for_inference(batch)  # as generation at this batch size would run
        step = profile_decode_step(model, batch, context)
        bound_ms = 1e3 * bound_seconds(model.cfg, dtype, batch, context, limits)
        rows.append({"batch_size": batch, "context": context, **step, "bound_ms": bound_ms,
                     "pct_of_bound": 100 * bound_ms / step["step_ms"],
                     "decode_tokens_per_s": batch / step["step_ms"] * 1e3})
    return rows
