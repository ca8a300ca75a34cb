"""Stage `pretrain`: teach the toy Qwen3 arithmetic by causal language modelling.

The offline default is only worth running if its numbers mean something, so the toy is
pretrained the way a base model's web text would teach it: after the book's prompt, most
answers in its corpus are bare (`The answer is \boxed{6}.`) and a minority (`worked_share`)
show their work, one line per operation. The base model so learns both habits, answers
directly when decoding greedily (the common habit), and fails long chains it cannot compute in
one go, while its rarer step-by-step answers solve them: what self-consistency, GRPO and
distillation each have to gain. The prompt is context, not a target: the loss covers the
answers, averaged over their tokens.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from ..world.arith import direct_answer
from ..model.checkpoint import save_model
from ..core.devices import resolve_device
from ..core.io import atomic_path, read_jsonl, write_json
from ..core.memory import PeakMemory
from ..core.plots import moving_average, save_figure, subplots
from ..data.prompts import TextTokenizer, render_prompt
from ..core.provenance import run_info
from ..training.examples import Example, epoch_batches, pack
from ..training.loop import train_loop
from ..training.losses import packed_token_mean_nll
from ..training.state import finish_run, run_identity
from ..core.settings import Settings
from ..training.settings import TrainingFiles


@dataclass(frozen=True)
class PretrainSettings(Settings):
    """The toy model's pretraining settings (config `pretrain:`, and threads);
    they are the run's identity with its data, starting weights and code."""

    steps: int
    batch_size: int
    lr: float  # the peak, after `warmup` steps; cosine decay to a tenth
    warmup: int
    weight_decay: float
    worked_share: float  # share of examples that show their work
    checkpoint_every: int
    seed: int
    device: str
    threads: int


def learning_rate(step: int, steps: int, peak: float, warmup: int) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def shows_work(n_records: int, worked_share: float, seed: int) -> np.ndarray:
    """Which records' answers in the corpus show their work: a seeded `worked_share` of them."""
    return np.random.default_rng([seed, 1]).random(n_records) < worked_share


def pretraining_examples(records: list[dict], tokenizer: TextTokenizer, worked_share: float,
                         seed: int) -> list[Example]:
    """The book's prompt, then the worked solution or the bare answer, then the end token."""
    examples = []
    for record, worked in zip(records, shows_work(len(records), worked_share, seed)):
        prompt = tokenizer.encode(render_prompt(record["problem"]))
        answer = record["solution"] if worked else direct_answer(record["answer"])
        examples.append(Example(prompt + tokenizer.encode(" " + answer) + [tokenizer.eos_token_id],
                                len(prompt)))
    return examples


class EpochBatches:
    """The examples step k trains on: each epoch shuffles them into batches anew
    (`epoch_batches`), made when the epoch's first step asks."""

    def __init__(self, examples: list, batch_size: int, seed: int):
        self.examples, self.batch_size, self.seed = examples, batch_size, seed
        self.lengths = [len(e.ids) for e in examples]
        self.steps_per_epoch = math.ceil(len(examples) / batch_size)
        self.epoch, self.groups = None, []

    def __call__(self, step: int) -> list:
        epoch, offset = divmod(step, self.steps_per_epoch)
        if epoch != self.epoch:
            # Not sorted by length: batches of only short (bare) or only long (worked) answers
            # made the toy fail to learn the habits' mix (tried: 0.27 accuracy).
            self.epoch = epoch
            self.groups = epoch_batches(self.lengths, self.batch_size, self.seed, epoch, False)
        return [self.examples[i] for i in self.groups[offset]]


def pretrain(init_dir: str, train_path: str, files: TrainingFiles, settings: PretrainSettings,
             params: dict) -> None:
    """Train `init_dir`'s model on `train_path` for `settings.steps` steps; write the model, its
    log, loss plot and metrics. A checkpoint in `files.work_dir` is resumed only if the same run
    wrote it."""
    identity = run_identity(__name__, settings.as_dict(), [train_path], init_dir)
    torch_device = resolve_device(settings.device)
    torch.set_num_threads(settings.threads)
    tokenizer = TextTokenizer.from_model_dir(init_dir)
    examples = pretraining_examples(read_jsonl(train_path), tokenizer, settings.worked_share,
                                    settings.seed)
    if len(examples) < settings.batch_size:
        raise ValueError(f"{train_path}: {len(examples)} examples < batch_size "
                         f"{settings.batch_size}")
    batch_of = EpochBatches(examples, settings.batch_size, settings.seed)

    def make_optimizer(model):
        return torch.optim.AdamW(model.parameters(), lr=settings.lr,
                                 weight_decay=settings.weight_decay, betas=(0.9, 0.95))

    def take_step(model, optimizer, step: int) -> dict:
        with PeakMemory(torch_device) as memory:
            tick = time.perf_counter()
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step, settings.steps, settings.lr, settings.warmup)
            # packed: the batch's short and long answers computed without padding between them
            input_ids, segment_ids, loss_mask = pack(batch_of(step), tokenizer.pad_token_id,
                                                     torch_device)
            loss = packed_token_mean_nll(model, input_ids, segment_ids, loss_mask)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            seconds = time.perf_counter() - tick
        if (step + 1) % 50 == 0:
            print(f"step {step + 1}/{settings.steps} loss {loss.item():.4f}", flush=True)
        return {"step": step + 1, "loss": loss.item(), "lr": optimizer.param_groups[0]["lr"],
                "tokens_per_sec": int((segment_ids > 0).sum()) / seconds,
                "step_seconds": seconds, "peak_mem_mb": memory.peak_mb}

    trained = train_loop(
        identity=identity, start_dir=init_dir, work_dir=files.work_dir, device=torch_device,
        dtype="float32", seed=settings.seed, steps=settings.steps,
        checkpoint_every=settings.checkpoint_every,
        make_optimizer=make_optimizer, first_rows=lambda model: [], take_step=take_step)
    save_model(trained.model, files.model, source=init_dir)
    log = pd.DataFrame(trained.rows)
    with atomic_path(files.log_csv) as tmp:
        log.to_csv(tmp, index=False)
    plot_loss(log, files.curve_png)
    write_json({
        "steps": settings.steps, "n_examples": len(examples),
        "worked_examples": int(shows_work(len(examples), settings.worked_share,
                                          settings.seed).sum()),
        "first_loss": trained.rows[0]["loss"], "final_loss": float(log["loss"].tail(20).mean()),
        "wall_seconds_this_run": trained.seconds, "peak_memory_mb": float(log["peak_mem_mb"].max()),
        "resumed_from_step": trained.resumed_from,
    } | run_info(params, torch_device, __name__), files.metrics_json)
    finish_run(files.work_dir)


def plot_loss(log: pd.DataFrame, png: str) -> None:
    fig, ax = subplots(figsize=(6, 4))
    ax.plot(log["step"], log["loss"], alpha=0.4, label="loss")
    ax.plot(log["step"], moving_average(log["loss"], 20), label="moving average (20)")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_yscale("log")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.suptitle("Toy Qwen3 pretraining on arith")
    save_figure(fig, png)
