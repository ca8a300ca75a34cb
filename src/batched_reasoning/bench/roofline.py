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

import torch

from ..core import machine
from ..core.devices import synchronize
from ..core.machine import MachineLimits, measure_machine, product_gflop_s, timed_size
from ..engine import compiled
from ..engine.compiled import Eager
from ..engine.decode import DecodeState
from ..engine.generation import Greedy, pick
from ..engine.kv_cache import KVCache
from ..engine.roofline import bound_seconds, decode_step_work

__all__ = ["KINDS", "MachineLimits", "bound_seconds", "decode_step_work", "decode_table",
           "kind_of", "machine", "measure_machine", "product_gflop_s", "profile_decode_step",
           "timed_size"]

KINDS = ("matmul", "attention", "elementwise", "sampling", "compiled", "host")


def kind_of(op: str) -> str:
    """The kind of work a profiled operator does (a decode step has no other products).
    A compiled step's kernels run inside its graph, which the profiler sees as one region
    (`compiled`) unless inductor records them (`cpp.enable_kernel_profile`): then its products
    and attention show by name, its fused kernels (named after the operators they fuse) are
    elementwise, and `compiled` is what the graph's wrapper itself takes. Dynamo's guards and
    wrappers around the graph are host work."""
    if "cpp_fused" in op:
        return "elementwise"
    if op.startswith("Torch-Compiled Region") or "CompiledFxGraph" in op:
        return "compiled"
    if op.startswith(("TorchDynamo", "Pregraph", "AOTDispatcher")):
        return "host"
    if "scaled_dot_product" in op or "attention" in op:
        return "attention"
    if "linear" in op or op in ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul"):
        return "matmul"
    if op in ("aten::argmax", "aten::max", "aten::topk", "aten::sort", "aten::multinomial",
              "aten::cumsum"):
        return "sampling"
    return "elementwise"  # norms, RoPE, residual adds, activations, copies into the cache


def _decode_steps(state: DecodeState, tokens: list[int], steps: int) -> list[int]:
    """`steps` steps as the generation loop runs them: the static step, then greedy's pick
    and margin moved to the host."""
    for _ in range(steps):
        logits = state.step(tokens)
        tokens = [token for token, *_ in pick(Greedy(), logits, [])]
    synchronize(state.model.device)
    return tokens


def _prefilled(model, prompt, capacity: int, stepper) -> tuple[DecodeState, list[int]]:
    cache = KVCache.for_model(model, prompt.shape[0], capacity)
    logits = model(prompt, torch.ones_like(prompt, dtype=torch.bool), cache=cache, last_only=True)
    state = DecodeState.after_batch_prefill(model, cache, stepper)
    return state, logits[:, -1].argmax(-1).tolist()


@torch.inference_mode()
def profile_decode_step(model, batch: int, context: int, steps: int = 8, seed: int = 0,
                        stepper=None) -> dict:
    """Time `steps` decode steps of `batch` rows at about `context` cached positions (random
    prompt tokens, no padding), then profile as many more; milliseconds per step, in all and by
    kind. `host` is the profiled step's wall time that no operator accounts for (Python,
    the loop's bookkeeping, launching) and dynamo's guards. A compiled `stepper` first runs
    every step once on a cache of its own, so that compiling is not timed."""
    stepper = stepper or Eager()
    generator = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, model.cfg.vocab_size, (batch, context), generator=generator)
    prompt = prompt.to(model.device)
    capacity = stepper.capacity(context + 2 * steps + 1)
    with model.decoding(capacity):
        if not isinstance(stepper, Eager):
            _decode_steps(*_prefilled(model, prompt, capacity, stepper), 1 + 2 * steps)
        state, tokens = _prefilled(model, prompt, capacity, stepper)
        tokens = _decode_steps(state, tokens, 1)  # warm-up
        start = time.perf_counter()
        tokens = _decode_steps(state, tokens, steps)
        step_s = (time.perf_counter() - start) / steps
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
            start = time.perf_counter()
            _decode_steps(state, tokens, steps)
            profiled_s = time.perf_counter() - start
    kinds = dict.fromkeys(KINDS, 0.0)
    for event in profiler.key_averages():
        kinds[kind_of(event.key)] += event.self_cpu_time_total / 1e6
    kinds["host"] += max(profiled_s - sum(kinds.values()), 0.0)
    return {"step_ms": 1e3 * step_s, "profiled_step_ms": 1e3 * profiled_s / steps,
            **{f"{kind}_ms": 1e3 * seconds / steps for kind, seconds in kinds.items()}}


def decode_table(model, batch_sizes, context: int, dtype: str, compile: str = "off") -> list[dict]:
    """One row per batch size: the measured decode step against its roofline bound, and where
    the (profiled) step's time went. `compile: on` times the compiled step (`compiled`).

    The machine's limits are measured again right after each row's step, not once per run: on
    a shared machine they drift (a 2-vCPU AMD EPYC read 26.8 GB/s in one bench run and 32.6 in
    another an hour later), and a bound from half an hour before the step it is compared with
    measures the neighbours as much as the step. Each row records the limits its bound used."""
    rows = []
    for batch in sorted(batch_sizes):
        model.pack_for_inference(batch)  # as generation at this batch size would run
        stepper = (compiled.compiled_for(model) if compile == "on" else None) or Eager()
        step = profile_decode_step(model, batch, context, stepper=stepper)
        limits = measure_machine(model.device, model.dtype)
        bound_ms = 1e3 * bound_seconds(model.cfg, dtype, batch, context, limits)
        rows.append({"batch_size": batch, "context": context, "decode_mode": stepper.name,
                     **step, "read_gb_s": limits.read_gb_s,
                     "matmul_gflop_s": limits.matmul_gflop_s, "bound_ms": bound_ms,
                     "pct_of_bound": 100 * bound_ms / step["step_ms"],
                     "decode_tokens_per_s": batch / step["step_ms"] * 1e3})
    return rows
