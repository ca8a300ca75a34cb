"""Stage `self_consistency` (book chapter 4, Appendix E.5): sample many answers per problem.

The `vote` job (`stages.grade`) then takes the majority vote and grades it.

Every (problem, sample) pair is one prompt for `generate`, so a batch holds samples of several
problems at once. A sample's random stream is keyed by (seed, problem, sample) alone, so the same
answers come out whatever the batch size or strategy.

Early stop ends a problem once one answer holds a strict majority of `num_samples`, which no later
sample can overturn. Generation then runs in rounds: first the `num_samples // 2 + 1` samples
every problem needs before any answer can hold such a majority, then one more sample per still
undecided problem per round. A decided problem's remaining samples never enter a batch, the
samples that do run are the same as without early stop, and each problem uses exactly as many
samples as one-at-a-time sampling would, whatever the batch size. Late rounds hold at most one
sample per undecided problem, so their batches can be smaller than `batch_size`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from ..model.checkpoint import load_model
from ..core.devices import resolve_device
from ..engine.generation import Greedy, generate
from ..data.answers import extract_answer, is_decided
from ..core.io import read_jsonl, write_json, write_jsonl
from ..core.memory import PeakMemory
from ..data.prompts import TextTokenizer, format_prompt
from ..core.provenance import run_info
from ..core.settings import GenerationSettings
from ..engine.sampling import TopP


def sampling_rounds(num_samples: int, early_stop: bool) -> list[range]:
    """Sample indices generated per round (see the module docstring)."""
    if not early_stop:
        return [range(num_samples)]
    first = num_samples // 2 + 1
    return [range(first)] + [range(s, s + 1) for s in range(first, num_samples)]


def make_sampler(temperature: float, top_p: float, seed: int):
    """Top-p sampling, or greedy decoding at temperature 0 (every sample then agrees)."""
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    return Greedy() if temperature == 0 else TopP(temperature, top_p, seed)


@dataclass
class Samples:
    texts: list[list[str]]  # per problem, its samples in sample order (a prefix if stopped early)
    generated_tokens: int = 0
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    batches: int = 0
    prefills: int = 0  # prompts prefilled: a batch's samples of one problem share one prefill
    rounds: list[int] = field(default_factory=list)  # samples generated in each round
    kv_cache_mb: float = 0.0
    decode_mode: str = "eager"  # how the decode steps ran (`engine.compiled`), and its cost
    graphs: int = 0
    compile_seconds: float = 0.0


def sample_answers(
    model, tokenizer: TextTokenizer, prompts: list[list[int]], *,
    num_samples: int, strategy: str, batch_size: int, max_new_tokens: int, sampler,
    early_stop: bool, progress: bool = False, compile: str = "off",
) -> Samples:
    """Generate `num_samples` answers per prompt, batching (problem, sample) pairs together."""
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    samples = Samples(texts=[[] for _ in prompts])
    for sample_indices in sampling_rounds(num_samples, early_stop):
        undecided = [
            p for p, texts in enumerate(samples.texts)
            if not (early_stop and is_decided([extract_answer(t) for t in texts], num_samples))
        ]
        pairs = [(p, s) for p in undecided for s in sample_indices]
        if not pairs:
            break
        result = generate(
            model, [prompts[p] for p, _ in pairs], strategy=strategy, batch_size=batch_size,
            max_new_tokens=max_new_tokens, eos_token_id=tokenizer.end_token_ids,
            pad_token_id=tokenizer.pad_token_id, sampler=sampler, keys=pairs, progress=progress,
            compile=compile,
        )
        for (p, _), tokens in zip(pairs, result.tokens):
            samples.texts[p].append(tokenizer.decode(tokens))
        samples.generated_tokens += result.generated_tokens
        samples.prefill_seconds += result.prefill_seconds
        samples.decode_seconds += result.decode_seconds
        samples.batches += len(result.batch_rows)
        samples.prefills += result.prefills
        samples.kv_cache_mb = max(samples.kv_cache_mb, result.kv_cache_mb)
        samples.rounds.append(len(pairs))
        samples.decode_mode = result.compiled
        samples.graphs = max(samples.graphs, result.graphs)
        samples.compile_seconds += result.compile_seconds
    return samples


@dataclass(frozen=True)
class SamplingSettings(GenerationSettings):
    """A self-consistency run's settings: config `self_consistency:` (`Settings.configured`)
    and the job's."""

    strategy: str
    num_samples: int
    temperature: float
    top_p: float
    max_new_tokens: int
    prompt_suffix: str
    seed: int
    early_stop: bool
    limit: int | None


def self_consistency(model_dir: str, records_path: str, out_samples: str, out_metrics: str,
                     settings: SamplingSettings, params: dict, labels: dict) -> dict:
    """Sample every problem; write its samples (one record per problem) and the run's metrics.
    The `vote` job (`stages.grade`) votes and grades."""
    if settings.num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {settings.num_samples}")
    sampler = make_sampler(settings.temperature, settings.top_p, settings.seed)
    torch_device = resolve_device(settings.device)  # fail before any work
    torch.set_num_threads(settings.threads)
    records = read_jsonl(records_path)[:settings.limit]
    tokenizer = TextTokenizer.from_model_dir(model_dir, settings.prompt_style)
    prompts = [tokenizer.encode(format_prompt(r["problem"], settings.prompt_style,
                                              settings.prompt_suffix)) for r in records]
    model = load_model(model_dir, dtype=settings.dtype, device=torch_device)
    model.pack_for_inference(settings.batch_size)
    with PeakMemory(torch_device) as memory:
        start = time.perf_counter()
        samples = sample_answers(
            model, tokenizer, prompts, num_samples=settings.num_samples,
            strategy=settings.strategy, batch_size=settings.batch_size,
            max_new_tokens=settings.max_new_tokens, sampler=sampler,
            early_stop=settings.early_stop, progress=True, compile=settings.compile,
        )
        wall = time.perf_counter() - start
    write_jsonl([{"index": i, "texts": texts} for i, texts in enumerate(samples.texts)],
                out_samples)
    used = sum(map(len, samples.texts))
    metrics = labels | {
        "n_problems": len(records),
        "num_samples": settings.num_samples,
        "samples_used": used,
        "samples_saved": settings.num_samples * len(records) - used,
        "early_stop": settings.early_stop,
        "rounds": samples.rounds,
        "batches": samples.batches,
        "prefills": samples.prefills,
        "wall_seconds": wall,
        "prefill_seconds": samples.prefill_seconds,
        "decode_seconds": samples.decode_seconds,
        "generated_tokens": samples.generated_tokens,
        "tokens_per_second": samples.generated_tokens / wall,
        "peak_memory_mb": memory.peak_mb,
        "memory_measure": memory.measure,
        "kv_cache_mb": samples.kv_cache_mb,
        "decode_mode": samples.decode_mode, "graphs": samples.graphs,
        "compile_seconds": samples.compile_seconds,
        "strategy": settings.strategy, "batch_size": settings.batch_size, "dtype": settings.dtype,
        "end_token_ids": list(tokenizer.end_token_ids),
    } | run_info(params, torch_device, __name__)
    write_json(metrics, out_metrics)
    return metrics

