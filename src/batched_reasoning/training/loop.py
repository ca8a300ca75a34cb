"""The one training loop of pretraining, GRPO and distillation (`train_loop`): each stage supplies
its step and its log before training; the loop claims the work folder, resumes or starts, steps
and checkpoints (`state`). Each stage's settings are one typed object (`settings`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..model.checkpoint import load_model
from . import distributed
from .state import claim_work_dir, resume, save_training_state, seed_everything


@dataclass
class Trained:
    """What `train_loop` hands back to its stage."""

    model: torch.nn.Module
    rows: list[dict]  # the log: the stage's rows before training, then one per step
    resumed_from: int  # the step this process started at (0: not resumed)
    seconds: float  # this process's time in the loop


def train_loop(*, identity: dict, start_dir: str, work_dir, device: torch.device,
               dtype: str, seed: int, steps: int, checkpoint_every: int,
               make_optimizer: Callable, first_rows: Callable, take_step: Callable) -> Trained:
    """The training skeleton every stage shares.

    Rank 0 claims `work_dir` for the run `identity` describes (`claim_work_dir`); every rank
    then resumes its latest checkpoint (weights, optimizer, step, random states and the log so
    far), or seeds everything with `seed`, loads `start_dir` and logs `first_rows(model)` (e.g.
    an evaluation before training). Steps `start .. steps - 1` each run
    `take_step(model, optimizer, step)`, which returns the step's log row; rank 0 checkpoints
    every `checkpoint_every` steps but the last. The stage writes its outputs from the result
    and then calls `finish_run`.
    """
    if distributed.is_main():
        claim_work_dir(work_dir, identity)
    distributed.barrier()  # a stale checkpoint is gone before any rank looks for one
    resumed = resume(work_dir, make_optimizer, dtype, device)
    if resumed:
        model, optimizer, start, extra = resumed
        rows = extra["rows"]
    else:
        seed_everything(seed)
        model = load_model(start_dir, dtype=dtype, device=device)
        optimizer, start = make_optimizer(model), 0
        rows = first_rows(model)
    model.train()
    started = time.perf_counter()
    for step in range(start, steps):
        rows.append(take_step(model, optimizer, step))
        if distributed.is_main() and (step + 1) % checkpoint_every == 0 and step + 1 < steps:
            save_training_state(work_dir, model, optimizer, step + 1, start_dir, {"rows": rows})
    return Trained(model, rows, start, time.perf_counter() - started)
