"""Stage `evaluate`: greedy generation over the tokenized batches (`tokenization`).

It writes the answers and how they were made; the `grade` job (`stages.grade`) judges them, so
a change to the grader never generates again."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from ..model.checkpoint import load_model
from ..core.devices import resolve_device
from ..engine.generation import generate
from ..core.io import read_json, write_json, write_jsonl
from ..core.memory import PeakMemory
from ..engine.memory_model import baseline_mb, predict_peak_mb
from ..data.prompts import TextTokenizer
from ..core.provenance import run_info
from ..core.settings import GenerationSettings
from .tokenization import load_batches


def generations(result, tokenizer: TextTokenizer) -> list[dict]:
    """One record per problem: its answer, greedy margins and latency."""
    return [{"index": index, "generated_text": tokenizer.decode(tokens), "generated_ids": tokens,
             "margins": result.margins[index], "latency_seconds": result.latency[index]}
            for index, tokens in enumerate(result.tokens)]


@dataclass(frozen=True)
class EvaluationSettings(GenerationSettings):
    """An evaluation run's settings: config `evaluate:` (`Settings.configured`) and the job's."""

    strategy: str
    max_new_tokens: int


def evaluate(model_dir: str, batches_path: str, stats_path: str, out_generations: str,
             out_metrics: str, settings: EvaluationSettings, params: dict, labels: dict) -> dict:
    """Greedy generation over the padded batches; one record per problem plus metrics."""
    torch_device = resolve_device(settings.device)  # fail before any work
    torch.set_num_threads(settings.threads)
    prompts, order = load_batches(batches_path)
    tokenizer = TextTokenizer.from_model_dir(model_dir, settings.prompt_style)
    model = load_model(model_dir, dtype=settings.dtype, device=torch_device)
    baseline = baseline_mb(model)
    model.pack_for_inference(settings.batch_size)
    with PeakMemory(torch_device) as memory:
        start = time.perf_counter()
        result = generate(
            model, prompts, strategy=settings.strategy, batch_size=settings.batch_size,
            order=order, max_new_tokens=settings.max_new_tokens,
            eos_token_id=tokenizer.end_token_ids,
            pad_token_id=tokenizer.pad_token_id, progress=True, compile=settings.compile,
        )
        wall = time.perf_counter() - start
    write_jsonl(generations(result, tokenizer), out_generations)
    metrics = labels | {
        "n_problems": len(prompts),
        "wall_seconds": wall,
        "prefill_seconds": result.prefill_seconds,
        "decode_seconds": result.decode_seconds,
        "decode_mode": result.compiled, "graphs": result.graphs,
        "compile_seconds": result.compile_seconds,
        "generated_tokens": result.generated_tokens,
        # answers cut off by the budget before any end token: wrong only by accident of budget
        "truncated": sum(stop is None for stop in result.stop_tokens),
        "tokens_per_second": result.generated_tokens / wall,
        # only the batched strategies pad: sequential runs one prompt, continuous each at its length
        "pad_fraction": (read_json(stats_path)["pad_fraction"]
                         if settings.strategy in ("batched", "batched_stop") else 0.0),
        "peak_memory_mb": memory.peak_mb,
        "memory_measure": memory.measure,
        "kv_cache_mb": result.kv_cache_mb,
        "predicted_peak_memory_mb": predict_peak_mb(
            model.cfg, settings.dtype,
            1 if settings.strategy == "sequential" else settings.batch_size,
            max(len(p) for p in prompts), settings.max_new_tokens, settings.device, baseline,
            packed=model.packed,
        )["total"],
        "baseline_memory_mb": baseline,
        "latency_p50_seconds": float(np.percentile(result.latency, 50)),
        "latency_p95_seconds": float(np.percentile(result.latency, 95)),
        "strategy": settings.strategy, "batch_size": settings.batch_size, "dtype": settings.dtype,
        "end_token_ids": list(tokenizer.end_token_ids),
    } | run_info(params, torch_device, __name__)
    write_json(metrics, out_metrics)
    return metrics

