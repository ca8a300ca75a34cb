"""Sequential and batched generation with one calling convention.

Strategies (the book's Appendix E, plus one):
- `sequential`: one prompt at a time, the single-example baseline.
- `batched`: a left-padded batch; rows that finished keep emitting the end token (as
  placeholders) until the last row ends.
- `batched_stop`: rows that finished leave the compute batch and the KV cache at once.

Every strategy returns the same tokens for the same prompts under greedy decoding (float32);
tests hold them to that. Bookkeeping happens on the host: each step moves the new tokens to the
host once (`tolist`), which is also what decides who is finished.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import torch
from tqdm.auto import tqdm

from .kv_cache import KVCache
from .padding import batches, left_pad

STRATEGIES = ("sequential", "batched", "batched_stop")


@dataclass
class GenerationResult:
    tokens: list[list[int]]  # per prompt, in input order, without the end token
    latency: list[float]  # seconds from the start of a prompt's batch until its answer is done
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    batch_rows: list[list[int]] = field(default_factory=list)  # prompt indices of each batch

    @property
    def generated_tokens(self) -> int:
        return sum(len(t) for t in self.tokens)


class Greedy:
    """Pick the most likely token; the sampler interface with no randomness to seed."""

    def start(self, keys: Sequence[Sequence[int]], device) -> None:
        pass

    def __call__(self, logits: torch.Tensor, rows: list[int]) -> torch.Tensor:
        return logits.argmax(dim=-1)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def check_prompts(model, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> None:
    if not prompts:
        raise ValueError("generate: no prompts given")
    if max_new_tokens < 1:
        raise ValueError(f"generate: max_new_tokens must be >= 1, got {max_new_tokens}")
    limit = model.cfg.max_position_embeddings
    for index, prompt in enumerate(prompts):
        if len(prompt) == 0:
            raise ValueError(f"generate: prompt {index} is empty")
        if len(prompt) + max_new_tokens > limit:
            raise ValueError(
                f"generate: prompt {index} has {len(prompt)} tokens; with max_new_tokens="
                f"{max_new_tokens} it exceeds the model's context of {limit} positions"
            )


@torch.inference_mode()
def generate_batch(
    model,
    prompts: Sequence[Sequence[int]],
    rows: Sequence[int],
    max_new_tokens: int,
    eos_token_id: int | None,
    pad_token_id: int,
    sampler,
    drop_finished: bool,
    result: GenerationResult,
) -> None:
    """Generate for one batch; write tokens and latencies of prompt indices `rows` into `result`."""
    device = model.device
    start = time.perf_counter()
    input_ids, attention_mask = left_pad([prompts[r] for r in rows], pad_token_id, device)
    cache = KVCache.for_model(model, len(rows), input_ids.shape[1] + max_new_tokens)
    logits = model(input_ids, attention_mask, cache=cache, last_only=True)[:, -1]
    _sync(device)
    prefill_end = time.perf_counter()
    result.prefill_seconds += prefill_end - start

    outputs = [result.tokens[r] for r in rows]
    done = [False] * len(rows)
    in_batch = list(range(len(rows)))  # batch positions in the compute batch, in cache order
    while True:
        live = [j for j, b in enumerate(in_batch) if not done[b]]
        live_logits = logits if len(live) == len(in_batch) else logits[live]
        new_tokens = sampler(live_logits, [rows[in_batch[j]] for j in live]).tolist()
        now = time.perf_counter()
        for j, token in zip(live, new_tokens):
            b = in_batch[j]
            if token == eos_token_id:
                done[b] = True
            else:
                outputs[b].append(token)
                done[b] = len(outputs[b]) == max_new_tokens
            if done[b]:
                result.latency[rows[b]] = now - start
        if all(done):
            break
        if drop_finished:
            keep = [j for j, b in enumerate(in_batch) if not done[b]]
            if len(keep) < len(in_batch):
                cache.keep_rows(torch.tensor(keep, device=device))
                in_batch = [in_batch[j] for j in keep]
        next_ids = [eos_token_id if done[b] else outputs[b][-1] for b in in_batch]
        next_ids = torch.tensor(next_ids, device=device)[:, None]
        step_mask = torch.ones_like(next_ids, dtype=torch.bool)
        logits = model(next_ids, step_mask, cache=cache)[:, -1]
    _sync(device)
    result.decode_seconds += time.perf_counter() - prefill_end


def generate(
    model,
    prompts: Sequence[Sequence[int]],
    *,
    strategy: str,
    batch_size: int,
    max_new_tokens: int,
    eos_token_id: int | None,
    pad_token_id: int,
    sampler=None,
    keys: Sequence[Sequence[int]] | None = None,
    order: Sequence[int] | None = None,
    progress: bool = False,
) -> GenerationResult:
    """Generate a continuation for each prompt (token lists in, token lists out, input order).

    `eos_token_id=None` disables stopping (every row runs `max_new_tokens`, as in benchmarks).
    `keys` name each prompt for the sampler's per-row random streams (default: its index);
    `order` is the order prompts are batched in (e.g. sorted by length; default: input order).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {STRATEGIES}")
    check_prompts(model, prompts, max_new_tokens)
    sampler = sampler or Greedy()
    sampler.start(keys or [(i,) for i in range(len(prompts))], model.device)
    order = list(order) if order is not None else list(range(len(prompts)))
    if sorted(order) != list(range(len(prompts))):
        raise ValueError("generate: `order` must be a permutation of the prompt indices")
    if strategy == "sequential":
        batch_size = 1
    result = GenerationResult(tokens=[[] for _ in prompts], latency=[0.0] * len(prompts))
    with tqdm(total=len(prompts), desc=f"{strategy} bs={batch_size}", disable=not progress,
              mininterval=5) as bar:
        for rows in batches(order, batch_size):
            generate_batch(
                model, prompts, rows, max_new_tokens, eos_token_id, pad_token_id, sampler,
                drop_finished=strategy == "batched_stop", result=result,
            )
            result.batch_rows.append(rows)
            bar.update(len(rows))
    return result
