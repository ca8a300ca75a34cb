"""Stage `time_training`: what batching buys GRPO and distillation, timed like a benchmark.

The story's training runs train once, at their configured batch size. Their one-at-a-time twins
would double those stages' time, so this job times a fixed piece of the same work instead: the
first `timed_steps` steps from the same starting weights, under each setting (one at a time,
then every configured batched one). Per setting: one step of warm-up, not counted, then
repeats (`core.timing`), each from the starting weights with a fresh optimizer and the same
seed, so every repeat and every setting does the same work. Whether the settings' outputs agree
is recorded beside the times: GRPO's rollout tokens per step (seeded per rollout, so batching
must not change them), distillation's step losses (equal up to float rounding: a batch of
examples sums in another order than one at a time).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch

from ..core.devices import machine_record, resolve_device, synchronize
from ..core.io import read_jsonl, write_json
from ..core.memory import PeakMemory
from ..core.provenance import run_info
from ..core.timing import Repeats, repeat, setup_seconds
from ..data.prompts import TextTokenizer
from ..engine.sampling import TopP
from ..model.checkpoint import load_model
from ..training.state import seed_everything
from ..engine.agreement import compare_answer
from .distill import DistillRun, DistillSettings, train_step, training_examples
from .grpo import GRPOSettings, StepContext, grpo_step

# The number whose interval decides how many repeats a setting needs.
WATCHED = ("steps_per_s",)


def time_setting(model, start_state: dict, make_optimizer: Callable, step: Callable,
                 steps: int, seed: int, repeats: Repeats, device) -> dict:
    """Warm-up and repeats of `steps` calls of `step(model, optimizer, index) -> (output, row)`
    from `start_state`; each repeat's numbers, their summaries, the first repeat's outputs,
    whether every repeat's outputs agreed, and the peak memory."""
    outputs = []

    def run_steps(count: int) -> tuple[float, list]:
        model.load_state_dict(start_state)
        optimizer = make_optimizer(model)
        seed_everything(seed)
        synchronize(device)
        tick = time.perf_counter()
        done = [step(model, optimizer, index) for index in range(count)]
        synchronize(device)
        return time.perf_counter() - tick, done

    def run() -> dict[str, float]:
        wall, done = run_steps(steps)
        outputs.append([output for output, _ in done])
        generation = sum(row.get("gen_seconds", 0.0) for _, row in done)
        return {"work_s": wall, "steps_per_s": steps / wall, "generation_s": generation}

    with PeakMemory(device) as memory:
        summaries, samples = repeat(run, repeats, WATCHED, warm_up=lambda: run_steps(1))
    return {"repeats": len(samples), "samples": samples,
            "summaries": {name: s.as_dict() for name, s in summaries.items()},
            "outputs": outputs[0], "repeats_agree": all(o == outputs[0] for o in outputs[1:]),
            "peak_memory_mb": memory.peak_mb, "memory_measure": memory.measure}


def time_grpo(model_dir: str, train_path: str, out_metrics: str, *, config: dict,
              settings: list[tuple[str, int]], timed_steps: int, device: str, dtype: str,
              threads: int, prompt_style: str, seed: int, repeats: Repeats, params: dict,
              labels: dict, compile: str = "off") -> dict:
    """GRPO's first `timed_steps` steps with rollouts one at a time (`sequential`) and under
    each (strategy, batch size) of `settings`; `config` is the stage's settings
    (`Plan.settings`)."""
    torch_device = resolve_device(device)
    torch.set_num_threads(threads)
    tokenizer = TextTokenizer.from_model_dir(model_dir, prompt_style)
    model = load_model(model_dir, dtype=dtype, device=torch_device)
    model.train()
    start_state = starting_weights(model)
    train = read_jsonl(train_path)[:config["train_problems"]]
    setup = setup_seconds()
    runs = []
    for strategy, size in [("sequential", 1), *settings]:
        stage_settings = GRPOSettings.from_params(
            config, strategy=strategy, batch_size=size, device=device, dtype=dtype,
            compile=compile, steps=timed_steps, seed=seed, prompt_style=prompt_style,
            threads=threads)
        context = StepContext(stage_settings, tokenizer, train,
                              TopP(config["temperature"], config["top_p"], seed), torch_device)

        rollouts = {}  # each step's, from the last repeat (repeats agree, `repeats_agree`)

        def step(model, optimizer, index, context=context, rollouts=rollouts):
            rollouts[index] = []
            row = grpo_step(model, optimizer, index, context, rollouts[index])
            return row["rollouts_digest"], row

        measured = time_setting(model, start_state, adamw(config["lr"]), step,
                                timed_steps, seed, repeats, torch_device)
        runs.append({"strategy": strategy, "batch_size": size,
                     "units_per_step": config["num_rollouts"] * config["problems_per_step"]}
                    | measured | {"rollouts": [rollouts[i] for i in range(timed_steps)]})
    return write_timing(out_metrics, "grpo", "rollouts", runs, setup, timed_steps, torch_device,
                        dtype, params, labels)


def time_distill(model_dir: str, teacher_path: str, out_metrics: str, *, config: dict,
                 batch_sizes: list[int], timed_steps: int, device: str, dtype: str,
                 threads: int, prompt_style: str, seed: int, repeats: Repeats, params: dict,
                 labels: dict) -> dict:
    """Distillation's first `timed_steps` steps with one example at a time (batch size 1) and
    at each of `batch_sizes`; `config` is the stage's settings (`Plan.settings`)."""
    torch_device = resolve_device(device)
    torch.set_num_threads(threads)
    tokenizer = TextTokenizer.from_model_dir(model_dir, prompt_style)
    base = DistillSettings.from_params(config, batch_size=1, device=device, dtype=dtype,
                                       seed=seed, prompt_style=prompt_style, threads=threads)
    train, _, _ = training_examples(teacher_path, tokenizer, base)
    run = DistillRun(base, tokenizer, train, [], torch_device)  # its steps, in its order
    groups = [run.group(step) for step in range(min(timed_steps, run.total_steps))]
    model = load_model(model_dir, dtype=dtype, device=torch_device)
    model.train()
    start_state = starting_weights(model)
    setup = setup_seconds()
    runs = []
    for size in dict.fromkeys([1, *batch_sizes]):

        def step(model, optimizer, index, size=size):
            examples = [train[i] for i in groups[index]]
            loss_sum, _, _ = train_step(model, optimizer, examples, len(examples), size,
                                        tokenizer.pad_token_id, base.grad_clip, torch_device)
            return loss_sum / len(examples), {}

        measured = time_setting(model, start_state, adamw(base.lr), step,
                                len(groups), seed, repeats, torch_device)
        runs.append({"strategy": "sequential" if size == 1 else "batched", "batch_size": size,
                     "units_per_step": base.examples_per_step} | measured)
    return write_timing(out_metrics, "distill", "examples", runs, setup, len(groups),
                        torch_device, dtype, params, labels)


def starting_weights(model) -> dict:
    """A copy of the weights on the CPU, which every repeat starts from (device memory keeps
    only the model, as in a training run)."""
    return {name: value.detach().to("cpu", copy=True) for name, value in
            model.state_dict().items()}


def adamw(lr: float) -> Callable:
    """The training stages' optimizer, made afresh for each repeat."""
    return lambda model: torch.optim.AdamW(model.parameters(), lr=lr)


def agreement(stage: str, run: dict, baseline: dict, dtype: str) -> dict:
    """How a setting's outputs compare with the one-at-a-time setting's. GRPO: how many steps
    drew the same rollout tokens, and at the first step that did not (later steps train on other
    rollouts, so they part anyway) how its rollouts part: by near-ties (rounding carried a draw
    across a boundary) or not (`engine.agreement.compare_answer`). Distillation: the largest
    relative difference of a step's loss."""
    if stage == "grpo":
        pairs = list(zip(run["outputs"], baseline["outputs"]))
        same = sum(a == b for a, b in pairs)
        parted = next((i for i, (a, b) in enumerate(pairs) if a != b), None)
        first = None
        if parted is not None:
            first = {"step": parted + 1, "verdicts": [
                compare_answer(mine["tokens"], theirs["tokens"], theirs["margins"], dtype,
                               mine["draws"], theirs["draws"])
                for mine, theirs in zip(run["rollouts"][parted], baseline["rollouts"][parted])]}
        return {"same_steps": same, "compared_steps": len(pairs), "first_parted": first}
    worst = max(abs(a - b) / abs(b) for a, b in zip(run["outputs"], baseline["outputs"]))
    return {"max_loss_difference": worst if math.isfinite(worst) else None}


def write_timing(out_metrics: str, stage: str, unit: str, runs: list[dict], setup: float,
                 steps: int, device, dtype: str, params: dict, labels: dict) -> dict:
    baseline = dict(runs[0])  # outputs: GRPO, each step's rollout digest; distillation, its loss
    for run in runs:
        run |= agreement(stage, run, baseline, dtype)
    metrics = labels | {
        "stage": stage, "unit": unit, "timed_steps": steps, "setup_s": setup, "dtype": dtype,
        "threads": torch.get_num_threads(), "machine": machine_record(device), "runs": runs,
    } | run_info(params, device, __name__)
    write_json(metrics, out_metrics)
    return metrics
