"""Stage `distill` (the book's chapter 8): fine-tune a student on a teacher's reasoning traces.

The book trains one example at a time. Here a step's `examples_per_step` examples are
processed `batch_size` at a time (left-padded, loss on answer tokens only, averaged per
example), and their gradients accumulate into one update of the step's mean loss. So every
batch size, like every number of ranks (`distributed`: the step's examples are split among
them and the ranks average gradients), trains the same student: only the time differs, which is
what the sweep measures. Each epoch's steps follow from (seed, epoch) alone, and training
state is checkpointed, so a killed job resumes exactly.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from ..training import distributed
from ..model.checkpoint import save_model
from ..core.io import atomic_path, write_json
from ..core.memory import PeakMemory
from ..engine.padding import batches, length_sorted, pad_fraction
from ..core.plots import moving_average, save_figure, subplots
from ..data.prompts import TextTokenizer, format_prompt
from ..core.provenance import run_info
from ..world.teacher import load_teacher_rows
from ..training.examples import Example, collate, epoch_batches
from ..training.loop import train_loop
from ..training.losses import masked_nll
from ..training.state import finish_run, run_identity
from ..core.settings import Settings
from ..training.settings import TrainingFiles


@dataclass(frozen=True)
class DistillSettings(Settings):
    """A distillation run's settings: config `distill:`, and the job's batch size, device and
    threads. They are the run's identity with its teacher traces, starting weights and code."""

    prompt_style: str
    batch_size: int  # examples per forward pass (micro-batch)
    examples_per_step: int  # examples per optimizer step, over all ranks
    device: str
    dtype: str
    epochs: int
    lr: float
    max_seq_len: int  # longer examples are dropped
    validation_size: int
    max_examples: int | None  # None: every training example
    use_think_tokens: bool
    sort_by_length: bool  # batch examples of similar length: less padding
    grad_clip: float | None
    seed: int
    log_every: int  # steps between validation losses
    checkpoint_every: int
    threads: int

# --- Examples and batches -------------------------------------------------------------------

def answer_text(row: dict, use_think_tokens: bool) -> str:
    """The book's layout: `<think>thinking</think>\\n\\ncontent` (without the tags if asked)."""
    thinking, content = row["message_thinking"].strip(), row["message_content"].strip()
    return f"<think>{thinking}</think>\n\n{content}" if use_think_tokens else f"{thinking}\n\n{content}"


def build_example(row: dict, tokenizer: TextTokenizer, prompt_style: str, use_think_tokens: bool) -> Example:
    prompt = tokenizer.encode(format_prompt(row["problem"], prompt_style))
    answer = tokenizer.encode(answer_text(row, use_think_tokens))
    return Example(prompt + answer + [tokenizer.eos_token_id], len(prompt))


def micro_batches(step: list[int], batch_size: int, world_size: int, rank: int) -> list[list[int]]:
    """What `rank` pads and runs together of a step's examples: its share of the step
    (`distributed.share`), `batch_size` at a time."""
    return batches(distributed.share(step, rank, world_size), batch_size)


@torch.no_grad()
def mean_loss(model, examples: list[Example], batch_size: int, pad_token_id: int) -> float:
    """Mean per-example answer loss; batched by length, which does not change the value. With
    several ranks each scores its share (no rank waits on another's long evaluation)."""
    total = 0.0
    order = length_sorted([len(e.ids) for e in examples])
    for group in batches(distributed.shard(order), batch_size):
        batch = collate([examples[i] for i in group], pad_token_id, model.device)
        total += masked_nll(model, *batch).item() * len(group)
    (total,) = distributed.all_reduce([total])
    return total / len(examples)


def split_validation(examples: list[Example], size: int, seed: int) -> tuple[list, list]:
    """(train, validation): a seeded random `size` examples are held out."""
    if size >= len(examples):
        raise ValueError(f"validation_size {size} leaves no training data ({len(examples)} examples)")
    held_out = set(np.random.default_rng([seed, 2**31]).permutation(len(examples))[:size].tolist())
    train = [e for i, e in enumerate(examples) if i not in held_out]
    return train, [e for i, e in enumerate(examples) if i in held_out]


def training_examples(teacher_path: str, tokenizer: TextTokenizer, settings: DistillSettings
                      ) -> tuple[list[Example], list[Example], dict]:
    """(train, validation, report): the teacher's usable traces as examples, those longer than
    `max_seq_len` dropped (counted in the report as `n_too_long`), a seeded validation set held
    out, the first `max_examples` of the rest to train on."""
    rows, report = load_teacher_rows(teacher_path)
    examples = [build_example(r, tokenizer, settings.prompt_style, settings.use_think_tokens)
                for r in rows]
    kept = [e for e in examples if len(e.ids) <= settings.max_seq_len]
    needed = settings.validation_size + settings.examples_per_step  # held out, and one step
    if len(kept) < needed:
        lengths = sorted(len(e.ids) for e in examples)
        fits = (f"; max_seq_len {lengths[needed - 1]} would keep {needed}"
                if len(lengths) >= needed else "")
        raise ValueError(
            f"{teacher_path}: {len(kept)} of {len(examples)} traces fit distill.max_seq_len "
            f"{settings.max_seq_len} (they are {lengths[0] if lengths else 0} to "
            f"{lengths[-1] if lengths else 0} tokens), but distill.validation_size "
            f"{settings.validation_size} and one step of distill.examples_per_step "
            f"{settings.examples_per_step} need {needed}{fits}")
    report["n_too_long"] = len(examples) - len(kept)
    if report["n_too_long"]:
        print(f"dropped {report['n_too_long']} of {len(examples)} examples longer than "
              f"{settings.max_seq_len} tokens", flush=True)
    train, validation = split_validation(kept, settings.validation_size, settings.seed)
    return train[:settings.max_examples], validation, report


# --- Training -------------------------------------------------------------------------------

def train_step(model, optimizer, examples: list[Example], step_examples: int, batch_size: int,
               pad_token_id: int, grad_clip: float | None, device) -> tuple[float, int, int]:
    """One AdamW step on this rank's `examples` of a step of `step_examples` over all ranks,
    run `batch_size` at a time.

    Each micro-batch's mean loss is scaled by its share of the step (times the world size, which
    the ranks' average undoes), so the gradients add up to those of the step's mean per-example loss
    whatever the batch size and the split among ranks (world size 1, one batch: the scale is
    exactly 1). Ranks average their gradients once, after their last micro-batch; a rank left
    without examples by a short last step adds zeros.
    Returns this rank's (summed example losses, real tokens, padded cells).
    """
    optimizer.zero_grad(set_to_none=True)
    loss_sum, tokens, cells = 0.0, 0, 0
    for part in batches(examples, batch_size):
        scale = len(part) / step_examples * distributed.world_size()
        input_ids, attention_mask, loss_mask = collate(part, pad_token_id, device)
        mean = masked_nll(model, input_ids, attention_mask, loss_mask)
        (mean * scale).backward()
        loss_sum += mean.item() * len(part)
        tokens += int(attention_mask.sum())
        cells += attention_mask.numel()
    distributed.average_gradients(model)
    if grad_clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    return loss_sum, tokens, cells


class DistillRun:
    """One distillation run's steps: which examples step s trains on (a function of the seed
    and its epoch, so a resumed run replays them), one training step and its log row, and the
    validation loss."""

    def __init__(self, settings: DistillSettings, tokenizer: TextTokenizer, train: list[Example],
                 validation: list[Example], device):
        self.settings, self.tokenizer, self.device = settings, tokenizer, device
        self.train, self.validation = train, validation
        self.lengths = [len(e.ids) for e in train]
        self.steps_per_epoch = math.ceil(len(train) / settings.examples_per_step)
        self.total_steps = settings.epochs * self.steps_per_epoch
        self._epoch_groups: dict[int, list[list[int]]] = {}

    def group(self, step: int) -> list[int]:
        """The training examples of step `step` (0-based), over all ranks."""
        epoch, offset = divmod(step, self.steps_per_epoch)
        if epoch not in self._epoch_groups:
            self._epoch_groups = {epoch: epoch_batches(
                self.lengths, self.settings.examples_per_step, self.settings.seed, epoch,
                self.settings.sort_by_length)}
        return self._epoch_groups[epoch][offset]

    def validate(self, model) -> float:
        return mean_loss(model, self.validation, self.settings.batch_size,
                         self.tokenizer.pad_token_id)

    def step(self, model, optimizer, step: int) -> dict:
        """Train step `step` on this rank's share of its examples; its log row."""
        settings, group = self.settings, self.group(step)
        with PeakMemory(self.device) as memory:
            tick = time.perf_counter()
            loss_sum, tokens, cells = train_step(
                model, optimizer, [self.train[i] for i in distributed.shard(group)], len(group),
                settings.batch_size, self.tokenizer.pad_token_id, settings.grad_clip,
                self.device)
        seconds = time.perf_counter() - tick
        loss_sum, tokens, cells = distributed.all_reduce([loss_sum, tokens, cells])
        seconds, peak_mb = distributed.all_reduce([seconds, memory.peak_mb], op="max")
        row = {"epoch": step // self.steps_per_epoch + 1, "step": step + 1,
               "train_loss": loss_sum / len(group), "val_loss": math.nan,
               "tokens_per_sec": tokens / seconds, "pad_fraction": 1 - tokens / cells,
               "peak_mem_mb": peak_mb, "tokens": int(tokens), "examples": len(group),
               "step_seconds": seconds}
        if (step + 1) % settings.log_every == 0 or step + 1 == self.total_steps:
            row["val_loss"] = self.validate(model)
        if distributed.is_main() and not math.isnan(row["val_loss"]):
            print(f"epoch {row['epoch']}/{settings.epochs} step {step + 1}/{self.total_steps} "
                  f"train_loss {row['train_loss']:.4f} val_loss {row['val_loss']:.4f} "
                  f"{row['tokens_per_sec']:.0f} tokens/s", flush=True)
        return row


def distill(model_dir: str, teacher_path: str, files: TrainingFiles, settings: DistillSettings,
            params: dict, labels: dict) -> dict | None:
    """Train the student; write it to `files.model` with its log, loss curve and metrics.

    `files.work_dir` holds the resumable checkpoint, resumed only if the same run wrote it, and is
    removed once the outputs are written. In a multi-rank run rank 0 writes everything and
    returns the metrics; the others return None.
    """
    identity = run_identity(__name__, settings.as_dict(), [teacher_path], model_dir)
    torch_device = distributed.device(settings.device)
    torch.set_num_threads(distributed.threads_per_rank(settings.threads))
    tokenizer = TextTokenizer.from_model_dir(model_dir, settings.prompt_style)
    train, validation, report = training_examples(teacher_path, tokenizer, settings)
    world_size = distributed.world_size()
    if world_size > settings.examples_per_step:
        raise ValueError(f"world size {world_size} exceeds distill.examples_per_step "
                         f"({settings.examples_per_step}): ranks would idle")
    run = DistillRun(settings, tokenizer, train, validation, torch_device)
    trained = train_loop(
        identity=identity, start_dir=model_dir, work_dir=files.work_dir, device=torch_device,
        dtype=settings.dtype, seed=settings.seed, steps=run.total_steps,
        checkpoint_every=settings.checkpoint_every,
        make_optimizer=lambda model: torch.optim.AdamW(model.parameters(), lr=settings.lr),
        first_rows=lambda model: [{"epoch": 0, "step": 0, "train_loss": math.nan,
                                   "val_loss": run.validate(model)}],
        take_step=run.step)
    if not distributed.is_main():
        return None

    save_model(trained.model, files.model, source=model_dir)
    frame = pd.DataFrame(trained.rows)
    with atomic_path(files.log_csv) as tmp:
        frame.to_csv(tmp, index=False)
    plot_curve(frame, files.curve_png,
               f"Distillation: {labels.get('model')} on {labels.get('dataset')} teacher traces, "
               f"batch size {settings.batch_size} on {world_size} rank(s)")
    metrics = labels | {
        "batch_size": settings.batch_size, "examples_per_step": settings.examples_per_step,
        "world_size": world_size, "dtype": settings.dtype, "epochs": settings.epochs,
        "steps": run.total_steps, "n_teacher_rows": report["n_rows"],
        "n_malformed": report["n_malformed"], "malformed": report["malformed"],
        "n_too_long": report["n_too_long"], "n_train": len(train),
        "n_validation": len(validation), "wall_seconds_this_run": trained.seconds,
        "resumed_from_step": trained.resumed_from, "sort_by_length": settings.sort_by_length,
        "use_think_tokens": settings.use_think_tokens,
    } | summarize(frame, run.lengths, settings, world_size) | run_info(params, torch_device,
                                                                        __name__)
    write_json(metrics, files.metrics_json)
    finish_run(files.work_dir)
    return metrics


def summarize(frame: pd.DataFrame, lengths: list[int], settings: DistillSettings,
              world_size: int) -> dict:
    """A run's totals from its per-step log (row 0, before training, only gives the validation
    loss), and the padding of its micro-batches with and without sorting by length."""
    steps = frame[frame["step"] > 0]

    def padding(sort: bool) -> float:
        return pad_fraction([
            [lengths[i] for i in part] for epoch in range(settings.epochs)
            for step in epoch_batches(lengths, settings.examples_per_step, settings.seed, epoch,
                                      sort)
            for rank in range(world_size)
            for part in micro_batches(step, settings.batch_size, world_size, rank)])

    return {
        "train_seconds": float(steps["step_seconds"].sum()),
        "train_tokens": int(steps["tokens"].sum()),
        "tokens_per_second": float(steps["tokens"].sum() / steps["step_seconds"].sum()),
        "pad_fraction": padding(settings.sort_by_length),
        "pad_fraction_unsorted": padding(False),
        "peak_memory_mb": float(steps["peak_mem_mb"].max()),
        "initial_val_loss": float(frame["val_loss"].iloc[0]),
        "final_val_loss": float(frame["val_loss"].iloc[-1]),
    }


def plot_curve(log: pd.DataFrame, png: str, title: str) -> None:
    """One run: training loss per step (and its moving average), validation loss, epoch bounds."""
    steps, val = log[log["step"] > 0], log.dropna(subset=["val_loss"])
    fig, ax = subplots(figsize=(7, 4))
    ax.plot(steps["step"], steps["train_loss"], alpha=0.3, label="train loss")
    ax.plot(steps["step"], moving_average(steps["train_loss"], 20),
            label="train loss, moving average (20)")
    ax.plot(val["step"], val["val_loss"], "o-", label="validation loss")
    for end in steps.groupby("epoch")["step"].max().iloc[:-1]:
        ax.axvline(end, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("step (dotted: epoch end)")
    ax.set_ylabel("answer-token cross-entropy (nats)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.suptitle(title, fontsize=10)
    save_figure(fig, png)
