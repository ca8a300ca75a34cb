"""Shared pieces of the training stages (pretrain, GRPO, distillation).

- the token-level loss over chosen positions, averaged per example then over the batch, so batch
  size 1 and batch size N optimise the same objective;
- resumable training state: weights in the library's HF format plus optimizer, step counter and
  every random state, so a killed job continues exactly where its last checkpoint left off.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from .checkpoint import load_model, save_model
from .io import atomic_path

STATE_FILE = "trainer_state.pt"


def token_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Log-probability of each next token: (batch, time - 1); entry t scores token t + 1."""
    logits = model(input_ids, attention_mask).float()
    logprobs = F.log_softmax(logits[:, :-1], dim=-1)
    return logprobs.gather(-1, input_ids[:, 1:, None]).squeeze(-1)


def masked_nll(model, input_ids, attention_mask, loss_mask) -> torch.Tensor:
    """Mean negative log-likelihood of the tokens where `loss_mask` is True.

    `loss_mask` marks target tokens (batch, time); position 0 is never a target. Each example's
    loss is its mean over its own targets; the batch loss is the mean over examples.
    """
    targets = loss_mask[:, 1:].float()
    nll = -token_logprobs(model, input_ids, attention_mask) * targets
    return (nll.sum(-1) / targets.sum(-1).clamp(min=1)).mean()


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def random_states() -> dict:
    return {"python": random.getstate(), "numpy": np.random.get_state(),
            "torch": torch.get_rng_state()}


def restore_random_states(states: dict) -> None:
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])


def save_training_state(directory, model, optimizer, step: int, source, extra: dict | None = None):
    """Checkpoint `directory/step-{step:06d}`: HF-format weights + optimizer, step, random states.

    Written to a staging name and renamed, so a kill mid-save leaves the previous checkpoint as
    the latest complete one.
    """
    directory = Path(directory)
    final = directory / f"step-{step:06d}"
    staging = directory / f".step-{step:06d}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    save_model(model, staging, source=source)
    state = {"step": step, "optimizer": optimizer.state_dict(), "random": random_states(),
             "extra": extra or {}}
    with atomic_path(staging / STATE_FILE) as tmp:
        torch.save(state, tmp)
    shutil.rmtree(final, ignore_errors=True)
    staging.rename(final)
    return final


def latest_checkpoint(directory) -> Path | None:
    complete = sorted(p for p in Path(directory).glob("step-*") if (p / STATE_FILE).is_file())
    return complete[-1] if complete else None


def resume(directory, optimizer_factory, dtype: str, device) -> tuple | None:
    """(model, optimizer, step, extra) from the latest checkpoint in `directory`, or None."""
    checkpoint = latest_checkpoint(directory)
    if checkpoint is None:
        return None
    model = load_model(checkpoint, dtype=dtype, device=device)
    optimizer = optimizer_factory(model)
    state = torch.load(checkpoint / STATE_FILE, weights_only=False)
    optimizer.load_state_dict(state["optimizer"])
    restore_random_states(state["random"])
    print(f"resumed from {checkpoint} (step {state['step']})", flush=True)
    return model, optimizer, state["step"], state["extra"]
