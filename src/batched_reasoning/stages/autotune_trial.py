"""One batch size of an `autotune` probe, run in its own process: the stage's work at that size,
one warm-up and `REPEATS` timed repeats, and the process's peak memory.

Generation stages run every answer to `max_new_tokens` (no end token), so every size does the
same work per sequence and only the batching differs; distillation runs one training step of
`examples_per_step` examples, `batch_size` at a time, as the stage does.

    python -m batched_reasoning.stages.autotune_trial SPEC.json BATCH_SIZE RESULT.json
"""

from __future__ import annotations

import json
import sys
import time
from itertools import cycle, islice
from pathlib import Path

import torch

from ..model.checkpoint import load_model
from ..core.devices import resolve_device, synchronize
from ..engine.generation import generate
from ..core.memory import PeakMemory
from ..engine.sampling import TopP
from ..training.loop import Example

REPEATS = 3  # timed repeats per size, after one warm-up; the probe takes their median
# How the allocators of each platform word running out of memory (MPS's is a plain RuntimeError).
OOM_MESSAGES = ("out of memory", "can't allocate memory", "not enough memory",
                "Invalid buffer size")


def is_out_of_memory(error: BaseException) -> bool:
    return isinstance(error, (torch.OutOfMemoryError, MemoryError)) or (
        isinstance(error, RuntimeError) and any(m in str(error) for m in OOM_MESSAGES))


def first(items: list, n: int) -> list:
    """The first `n` of `items`, cycling through them again if there are fewer."""
    return list(islice(cycle(items), n))


def generation_repeat(model, spec: dict, batch_size: int):
    prompts = first(spec["sequences"], batch_size)
    sampler = (TopP(spec["sampler"]["temperature"], spec["sampler"]["top_p"], spec["sampler"]["seed"])
               if spec["sampler"] else None)
    model.pack_for_inference(batch_size)

    def repeat() -> int:
        result = generate(model, prompts, strategy="batched", batch_size=batch_size,
                          max_new_tokens=spec["max_new_tokens"], eos_token_id=None,
                          pad_token_id=spec["pad_token_id"], sampler=sampler)
        return result.generated_tokens

    return repeat


def training_repeat(model, spec: dict, batch_size: int):
    from .distill import train_step

    examples = [Example(**e) for e in first(spec["examples"], spec["examples_per_step"])]
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0)  # its state, not its steps, counts
    model.train()

    def repeat() -> int:
        _, tokens, _ = train_step(model, optimizer, examples, len(examples), batch_size,
                                  spec["pad_token_id"], None, model.device)
        return tokens

    return repeat


def measure(spec: dict, batch_size: int) -> dict:
    device = resolve_device(spec["device"])
    torch.set_num_threads(spec["threads"])
    torch.manual_seed(0)
    model = load_model(spec["model_dir"], dtype=spec["dtype"], device=device)
    make_repeat = training_repeat if spec["stage"] == "distill" else generation_repeat
    rates = []
    with PeakMemory(device) as memory:
        repeat = make_repeat(model, spec, batch_size)
        repeat()  # warm-up: kernels chosen, caches allocated
        for _ in range(REPEATS):
            synchronize(device)
            start = time.perf_counter()
            tokens = repeat()
            synchronize(device)
            rates.append(tokens / (time.perf_counter() - start))
    return {"status": "ok", "tokens_per_second": rates, "peak_memory_mb": memory.peak_mb}


def main(spec_path: str, batch_size: str, result_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    try:
        result = measure(spec, int(batch_size))
    except Exception as error:  # noqa: BLE001 - only out-of-memory is a result, the rest re-raises
        if not is_out_of_memory(error):
            raise
        result = {"status": "oom", "note": f"{type(error).__name__}: {str(error)[:200]}"}
    Path(result_path).write_text(json.dumps(result))


if __name__ == "__main__":
    main(*sys.argv[1:])
