"""Stage `time_generation`: one point of the batching curve, timed like a benchmark.

One job per batch size runs every configured strategy on the same fixed workload (the first
problems of the split; self-consistency: each with all its samples), so one process and one
model load serve the whole sweep point. Per strategy: a warm-up of one batch that is not
counted, then repeats of the whole workload (`core.timing`). All requests are submitted when a
repeat starts, so a request's completion time includes its wait for earlier batches, as a
client of an offline job sees it. Every repeat must give the same tokens; the tables check
them against the one-at-a-time run's, token for token, and grade them (accuracy and correct
answers per second), so a change to the grader times nothing again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from ..core.devices import machine_record, resolve_device
from ..core.io import read_jsonl, write_json, write_jsonl
from ..core.machine import machine_limits
from ..core.memory import PeakMemory
from ..core.provenance import run_info
from ..core.settings import GenerationSettings
from ..core.timing import Repeats, repeat, setup_seconds
from ..data.prompts import TextTokenizer, format_prompt
from ..engine import compiled
from ..engine.generation import Greedy, generate
from ..engine.padding import batches, pad_fraction
from ..engine.workload import finished_row_share, length_stats
from ..model.checkpoint import load_model
from ..engine.memory_model import baseline_mb, predict_peak_mb
from ..engine.roofline import bound_tokens_per_s
from .self_consistency import make_sampler

# The numbers whose interval decides how many repeats a point needs.
WATCHED = ("tokens_per_s",)


def workload(records: list[dict], tokenizer: TextTokenizer, prompt_style: str,
             num_samples: int, suffix: str = "") -> tuple[list[list[int]], list[tuple[int, int]]]:
    """Prompts and their keys (problem, sample): each problem `num_samples` times in a row."""
    encoded = [tokenizer.encode(format_prompt(r["problem"], prompt_style, suffix)) for r in records]
    keys = [(p, s) for p in range(len(records)) for s in range(num_samples)]
    return [encoded[p] for p, _ in keys], keys


def one_repeat(generate_all) -> tuple[dict[str, float], object]:
    """Time one run of the whole workload: its numbers and its result."""
    start = time.perf_counter()
    result = generate_all()
    wall = time.perf_counter() - start
    completion = result.completion
    return {
        "tokens_per_s": result.generated_tokens / wall,
        "wall_s": wall,
        "completion_p50_s": float(np.percentile(completion, 50)),
        "completion_p95_s": float(np.percentile(completion, 95)),
        "completion_p99_s": float(np.percentile(completion, 99)),
        "service_p50_s": float(np.percentile(result.latency, 50)),
        "ttft_p50_s": float(np.percentile(result.time_to_first_token, 50)),
        "tpot_p50_ms": 1e3 * float(np.median(result.time_per_output_token or [0.0])),
        "decode_step_ms": 1e3 * result.decode_seconds / max(result.decode_steps, 1),
        "decode_share": result.decode_seconds / (result.decode_seconds + result.prefill_seconds),
    }, result


@dataclass
class Workload:
    """What every strategy of a point runs: the model and its prompts."""

    model: object
    tokenizer: TextTokenizer
    prompts: list[list[int]]
    keys: list[tuple[int, int]]
    sampler: object
    max_new_tokens: int
    compile: str = "off"  # `auto` is resolved per strategy before timing (`decode_mode`)

    def decode_mode(self, size: int) -> str:
        """`off` or `on` for the whole timed workload at `size` rows."""
        capacity = max(map(len, self.prompts)) + self.max_new_tokens
        steps = -(-len(self.prompts) // size) * self.max_new_tokens
        return compiled.resolve(self.model, self.compile, size, capacity, steps)

    def generate(self, strategy: str, batch_size: int, count: int, compile: str = "off"):
        return generate(self.model, self.prompts[:count], strategy=strategy,
                        batch_size=batch_size, max_new_tokens=self.max_new_tokens,
                        eos_token_id=self.tokenizer.end_token_ids,
                        pad_token_id=self.tokenizer.pad_token_id, sampler=self.sampler,
                        keys=self.keys[:count], compile=compile)



def time_strategy(work: Workload, strategy: str, size: int, repeats: Repeats, device):
    """A warm-up batch, then the repeats of the whole workload; their summaries, the raw
    repeats, the first repeat's result and the peak memory. Every repeat must give the same
    tokens."""
    results, mode = [], work.decode_mode(size)
    everything = len(work.prompts)

    def run() -> dict[str, float]:
        numbers, result = one_repeat(lambda: work.generate(strategy, size, everything, mode))
        results.append(result)
        return numbers

    warm_ups = []

    def warm_up() -> None:
        # A compiled warm-up runs the whole workload: every shape is traced before the clock runs.
        warm_ups.append(work.generate(strategy, size, everything if mode == "on" else size, mode))

    with PeakMemory(device) as memory:
        summaries, samples = repeat(run, repeats, WATCHED, warm_up=warm_up)
    first = results[0]
    first.compile_seconds = sum(r.compile_seconds for r in warm_ups + results)
    first.graphs = max(r.graphs for r in warm_ups + results)
    if any(r.tokens != first.tokens for r in results[1:]):
        raise RuntimeError(f"{strategy} at batch size {size}: repeats gave different tokens; "
                           "timing a nondeterministic run compares nothing")
    return summaries, samples, first, memory


@dataclass(frozen=True)
class TimingSettings(GenerationSettings):
    """A curve point's settings (`Plan.curve_settings`): the strategies it times at its batch
    size, the stage's timed workload (problems, answer budget, samples and how they are drawn),
    how it is timed (config `timing:`), and the job's device, dtype, decode mode, prompt style
    and threads."""

    strategies: list
    problems: int
    max_new_tokens: int
    num_samples: int
    temperature: float  # 0: greedy
    top_p: float
    prompt_suffix: str
    seed: int
    timing: dict  # minimum_repeats, maximum_repeats, relative_half_width


def time_generation(model_dir: str, records_path: str, out_records: str, out_metrics: str,
                    settings: TimingSettings, params: dict, labels: dict) -> dict:
    """Time every strategy at the batch size on the first `problems` problems (`num_samples`
    each; greedy at temperature 0). Writes each strategy's outputs and timed numbers."""
    torch_device = resolve_device(settings.device)  # fail before any work
    torch.set_num_threads(settings.threads)
    records = read_jsonl(records_path)[:settings.problems]
    tokenizer = TextTokenizer.from_model_dir(model_dir, settings.prompt_style)
    prompts, keys = workload(records, tokenizer, settings.prompt_style, settings.num_samples,
                             settings.prompt_suffix)
    model = load_model(model_dir, dtype=settings.dtype, device=torch_device)
    baseline = baseline_mb(model)
    model.pack_for_inference(settings.batch_size)
    sampler = (make_sampler(settings.temperature, settings.top_p, settings.seed)
               if settings.num_samples > 1 else Greedy())
    work = Workload(model, tokenizer, prompts, keys, sampler, settings.max_new_tokens,
                    settings.compile)
    setup = setup_seconds()  # before the roofline's one-off measurement of this machine
    limits = machine_limits(torch_device, model.dtype)
    repeats = Repeats.from_config(settings.timing)
    runs, outputs = [], []
    for strategy in settings.strategies:
        size = 1 if strategy == "sequential" else settings.batch_size
        summaries, samples, first, memory = time_strategy(work, strategy, size, repeats,
                                                          torch_device)
        runs.append({
            "strategy": strategy, "batch_size": size, "repeats": len(samples),
            "summaries": {name: s.as_dict() for name, s in summaries.items()},
            "samples": samples, "generated_tokens": first.generated_tokens,
            "peak_memory_mb": memory.peak_mb, "memory_measure": memory.measure,
            "kv_cache_mb": first.kv_cache_mb,
            "decode_mode": first.compiled, "graphs": first.graphs,
            "compile_seconds": first.compile_seconds,
            "predicted_peak_memory_mb": predict_peak_mb(
                model.cfg, settings.dtype, size, max(map(len, prompts)), settings.max_new_tokens,
                settings.device, baseline, distinct_prompts=min(size, len(records)),
                packed=model.packed)["total"],
        } | shape(work, strategy, size, first, limits))
        outputs += [{"strategy": strategy, "index": i, "key": list(key),
                     "generated_text": tokenizer.decode(tokens),
                     "generated_ids": tokens, "margins": margins, "draws": draws, "steps": n}
                    for i, (key, tokens, margins, draws, n) in enumerate(
                        zip(keys, first.tokens, first.margins, first.draws, first.steps))]
    write_jsonl(outputs, out_records)
    metrics = labels | {
        "n_problems": len(records), "num_samples": settings.num_samples,
        "n_prompts": len(prompts), "max_new_tokens": settings.max_new_tokens,
        "dtype": settings.dtype, "threads": torch.get_num_threads(),
        "temperature": settings.temperature if settings.num_samples > 1 else 0.0,
        "model_shape": model.cfg.to_dict(),
        "machine": machine_record(torch_device), "machine_limits": limits.as_dict(),
        "setup_s": setup, "runs": runs,
    } | run_info(params, torch_device, __name__)
    write_json(metrics, out_metrics)
    return metrics


def shape(work: Workload, strategy: str, size: int, result, limits) -> dict:
    """The workload's shape as this strategy ran it, and the roofline's bound on it."""
    prompt_lengths, steps = [len(p) for p in work.prompts], result.steps
    # a decode step's bound at the workload's typical context: prompt and half an answer
    context = int(np.median(prompt_lengths) + np.median(steps) / 2)
    bound, bound_by = bound_tokens_per_s(work.model.cfg, str(work.model.dtype).removeprefix(
        "torch."), size, context, limits)
    return {
        "prompt_length": length_stats(prompt_lengths),
        "answer_length": length_stats(steps),
        "pad_fraction": (pad_fraction([[prompt_lengths[i] for i in rows]
                                       for rows in batches(range(len(prompt_lengths)), size)])
                         if strategy in ("batched", "batched_stop") else 0.0),
        "finished_row_share": (finished_row_share(steps, result.batch_rows)
                               if strategy == "batched" else 0.0),
        "truncated": sum(stop is None for stop in result.stop_tokens),
        "bound_tokens_per_s": bound, "bound_by": bound_by,
    }
