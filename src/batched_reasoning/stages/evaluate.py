"""Stage `evaluate`: generate over the tokenized batches (`tokenization`), grade."""

from __future__ import annotations

import time

import numpy as np
import torch

from ..model.checkpoint import load_model
from ..core.devices import resolve_device
from ..engine.generation import generate
from ..data.grading import extract_answer, is_correct
from ..core.io import read_json, read_jsonl, write_json, write_jsonl
from ..core.memory import PeakMemory
from ..model.memory_model import baseline_mb, predict_peak_mb
from ..data.prompts import TextTokenizer
from ..core.provenance import run_info
from .tokenization import load_batches


def graded(records: list[dict], result, tokenizer: TextTokenizer) -> list[dict]:
    """One output record per problem: its answer, the answer extracted and graded, its greedy
    margins and latency."""
    outputs = []
    for index, (record, tokens) in enumerate(zip(records, result.tokens)):
        text = tokenizer.decode(tokens)
        extracted = extract_answer(text)
        outputs.append({
            "index": index, "problem": record["problem"], "gtruth_answer": record["answer"],
            "level": record.get("level"), "generated_text": text, "generated_ids": tokens,
            "margins": result.margins[index],
            "extracted": extracted, "correct": is_correct(extracted, record["answer"]),
            "latency_seconds": result.latency[index],
        })
    return outputs


def evaluate(
    model_dir: str, batches_path: str, records_path: str, stats_path: str,
    out_records: str, out_metrics: str, *,
    strategy: str, batch_size: int, device: str, dtype: str, max_new_tokens: int,
    prompt_style: str, threads: int, params: dict, labels: dict, compile: str = "off",
) -> dict:
    """Greedy generation over the padded batches; one graded record per problem plus metrics.
    `compile` is how decode steps run (`engine.compiled`)."""
    torch_device = resolve_device(device)  # fail before any work
    torch.set_num_threads(threads)
    prompts, order = load_batches(batches_path)
    records = read_jsonl(records_path)[: len(prompts)]
    tokenizer = TextTokenizer.from_model_dir(model_dir, prompt_style)
    model = load_model(model_dir, dtype=dtype, device=torch_device)
    baseline = baseline_mb(model)
    model.pack_for_inference(batch_size)
    with PeakMemory(torch_device) as memory:
        start = time.perf_counter()
        result = generate(
            model, prompts, strategy=strategy, batch_size=batch_size, order=order,
            max_new_tokens=max_new_tokens, eos_token_id=tokenizer.end_token_ids,
            pad_token_id=tokenizer.pad_token_id, progress=True, compile=compile,
        )
        wall = time.perf_counter() - start
    outputs = graded(records, result, tokenizer)
    write_jsonl(outputs, out_records)
    metrics = labels | {
        "n_problems": len(outputs),
        "accuracy": float(np.mean([o["correct"] for o in outputs])),
        "accuracy_by_level": accuracy_by_level(outputs),
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
                         if strategy in ("batched", "batched_stop") else 0.0),
        "peak_memory_mb": memory.peak_mb,
        "memory_measure": memory.measure,
        "kv_cache_mb": result.kv_cache_mb,
        "predicted_peak_memory_mb": predict_peak_mb(
            model.cfg, dtype, 1 if strategy == "sequential" else batch_size,
            max(len(p) for p in prompts), max_new_tokens, device, baseline,
        )["total"],
        "baseline_memory_mb": baseline,
        "latency_p50_seconds": float(np.percentile(result.latency, 50)),
        "latency_p95_seconds": float(np.percentile(result.latency, 95)),
        "strategy": strategy, "batch_size": batch_size, "dtype": dtype,
        "end_token_ids": list(tokenizer.end_token_ids),
    } | run_info(params, torch_device, __name__)
    write_json(metrics, out_metrics)
    return metrics


def accuracy_by_level(outputs: list[dict]) -> dict[str, float]:
    levels = sorted({o["level"] for o in outputs if o.get("level") is not None})
    return {
        str(level): float(np.mean([o["correct"] for o in outputs if o["level"] == level]))
        for level in levels
    }
