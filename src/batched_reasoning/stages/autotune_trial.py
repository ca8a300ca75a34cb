"""One batch size of an `autotune` probe, run in its own process: the stage's work at that size,
timed by the curves' harness (`core.timing`: one warm-up, then `REPEATS`), and the process's
peak memory.

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
from ..core.timing import Repeats, repeat
from ..engine.sampling import TopP
from ..training.examples import Example

# timed repeats per size, after one warm-up; the probe takes their median
REPEATS = Repeats(minimum=3, maximum=5, relative_half_width=0.05)
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
                          pad_token_id=spec["pad_token_id"], sampler=sampler,
                          compile=spec["compile"])
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
    with PeakMemory(device) as memory:
        work = make_repeat(model, spec, batch_size)

        def timed() -> dict[str, float]:
            synchronize(device)
            start = time.perf_counter()
            tokens = work()
            synchronize(device)
            return {"tokens_per_s": tokens / (time.perf_counter() - start)}

        # the warm-up chooses kernels and allocates caches
        summaries, samples = repeat(timed, REPEATS, ("tokens_per_s",), warm_up=work)
    return {"status": "ok", "tokens_per_second": [s["tokens_per_s"] for s in samples],
            "interval": summaries["tokens_per_s"].as_dict(), "peak_memory_mb": memory.peak_mb}


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
