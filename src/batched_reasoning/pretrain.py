"""Stage `pretrain`: teach the toy Qwen3 arithmetic by causal language modelling.

The offline default is only worth running if its numbers mean something: a model trained on
the `arith` train split (prompt + worked solution) solves easy problems often and hard ones
rarely, so accuracies, votes, rewards and losses downstream behave as with a real model.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd
import torch

from .checkpoint import load_model, save_model
from .io import atomic_path, read_jsonl, save_figure, write_json
from .memory import PeakMemory
from .padding import left_pad
from .prompts import TextTokenizer
from .provenance import resolve_device, run_info
from .toy import training_text
from .training import (
    claim_work_dir, finish_run, masked_nll, resume, run_identity, save_training_state,
    seed_everything, settings_of,
)


def learning_rate(step: int, steps: int, peak: float, warmup: int) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def batch_indices(step: int, n_examples: int, batch_size: int, seed: int) -> np.ndarray:
    """Examples of `step`: a seeded shuffle per epoch, derived from the step alone (resumable)."""
    per_epoch = n_examples // batch_size
    epoch, offset = divmod(step, per_epoch)
    order = np.random.default_rng([seed, epoch]).permutation(n_examples)
    return order[offset * batch_size:(offset + 1) * batch_size]


def pretrain(
    init_dir: str, train_path: str, out_dir: str, work_dir: str, log_csv: str, plot_png: str,
    metrics_json: str, *, steps: int, batch_size: int, lr: float, warmup: int,
    weight_decay: float, checkpoint_every: int, seed: int, device: str, threads: int,
    params: dict,
) -> None:
    """Train `init_dir`'s model on `train_path` for `steps` steps; write the model, its log,
    loss plot and metrics. A checkpoint in `work_dir` is resumed only if the same run wrote it."""
    identity = run_identity("pretrain", settings_of(pretrain, locals()), [train_path], init_dir)
    torch_device = resolve_device(device)
    torch.set_num_threads(threads)
    seed_everything(seed)
    tokenizer = TextTokenizer.from_model_dir(init_dir)
    examples = [tokenizer.encode(training_text(r)) + [tokenizer.eos_token_id]
                for r in read_jsonl(train_path)]
    if len(examples) < batch_size:
        raise ValueError(f"{train_path}: {len(examples)} examples < batch_size {batch_size}")

    def make_optimizer(model):
        return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)

    claim_work_dir(work_dir, identity)
    resumed = resume(work_dir, make_optimizer, "float32", torch_device)
    if resumed:
        model, optimizer, start, extra = resumed
        rows = extra["rows"]
    else:
        model = load_model(init_dir, device=torch_device)
        optimizer, start, rows = make_optimizer(model), 0, []
    model.train()
    started = time.perf_counter()
    with PeakMemory(torch_device) as memory:
        for step in range(start, steps):
            tick = time.perf_counter()
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step, steps, lr, warmup)
            chosen = [examples[i] for i in batch_indices(step, len(examples), batch_size, seed)]
            input_ids, attention_mask = left_pad(chosen, tokenizer.pad_token_id, torch_device)
            loss = masked_nll(model, input_ids, attention_mask, attention_mask)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            seconds = time.perf_counter() - tick
            rows.append({"step": step + 1, "loss": loss.item(), "lr": optimizer.param_groups[0]["lr"],
                         "tokens_per_sec": int(attention_mask.sum()) / seconds,
                         "step_seconds": seconds})
            if (step + 1) % 50 == 0:
                print(f"step {step + 1}/{steps} loss {loss.item():.4f}", flush=True)
            if (step + 1) % checkpoint_every == 0 and step + 1 < steps:
                save_training_state(work_dir, model, optimizer, step + 1, init_dir, {"rows": rows})
    save_model(model, out_dir, source=init_dir)
    log = pd.DataFrame(rows)
    with atomic_path(log_csv) as tmp:
        log.to_csv(tmp, index=False)
    plot_loss(log, plot_png)
    write_json({
        "steps": steps, "first_loss": rows[0]["loss"], "final_loss": float(log["loss"].tail(20).mean()),
        "wall_seconds_this_run": time.perf_counter() - started, "peak_memory_mb": memory.peak_mb,
        "resumed_from_step": start,
    } | run_info(params, torch_device, "pretrain"), metrics_json)
    finish_run(work_dir)


def plot_loss(log: pd.DataFrame, png: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(log["step"], log["loss"], alpha=0.4, label="loss")
    ax.plot(log["step"], log["loss"].rolling(20, min_periods=1).mean(), label="moving average (20)")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_yscale("log")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.suptitle("Toy Qwen3 pretraining on arith")
    save_figure(fig, png)
