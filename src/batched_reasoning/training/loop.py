"""Shared pieces of the training stages (pretrain, GRPO, distillation).

- the one training loop (`train_loop`): each stage supplies its step and its log before
  training; the loop claims the work folder, resumes or starts, steps and checkpoints (each
  stage's settings are one typed object, `settings.py`);
- examples (prompt + answer, trained on the answer) and their left-padded batches;
- the token-level loss over chosen positions, averaged per example then over the batch, so batch
  size 1 and batch size N optimise the same objective (or over all tokens, for pretraining);
- resumable training state: weights in the library's HF format plus optimizer, step counter and
  every random state, so a killed job continues exactly where its last checkpoint left off;
- one training-run identity for all three stages: a work folder's checkpoint is resumed only by
  the run that wrote it (same settings, training data, starting weights and code), never by a
  rerun after any of them changed.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from . import distributed
from ..model.checkpoint import load_model, save_model
from ..core.io import atomic_path, read_json, write_json
from ..engine.padding import batches, left_pad, length_sorted
from ..core.provenance import code_hash

STATE_FILE = "trainer_state.pt"
IDENTITY_FILE = "run.json"


@dataclass(frozen=True)
class Example:
    """Token ids of prompt + answer + end token; the first `prompt_len` are not trained on."""

    ids: list[int]
    prompt_len: int


def collate(examples: list[Example], pad_token_id: int, device="cpu"):
    """(input_ids, attention_mask, loss_mask), left-padded; loss_mask marks answer tokens only."""
    input_ids, attention_mask = left_pad([e.ids for e in examples], pad_token_id, device)
    width = input_ids.shape[1]
    answer_start = torch.tensor([width - len(e.ids) + e.prompt_len for e in examples], device=device)
    loss_mask = torch.arange(width, device=device)[None, :] >= answer_start[:, None]
    return input_ids, attention_mask, loss_mask


PACK_TOKENS = 128  # a packed row's least room; rows as long as the longest example cost least


def pack(examples: list[Example], pad_token_id: int, device="cpu",
         capacity: int = PACK_TOKENS):
    """(input_ids, segment_ids, loss_mask): the examples laid end to end in as few rows as fit
    (first fit, longest first), so a batch of short and long examples computes no padding but
    the end of each row. Segment i + 1 is the i-th example, 0 the padding; loss_mask marks
    answer tokens. A row holds `capacity` tokens, or the longest example if it is longer."""
    capacity = max(capacity, max(len(e.ids) for e in examples))
    rows: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(examples)), key=lambda i: -len(examples[i].ids)):
        row = next((r for r, free in enumerate(room) if free >= len(examples[i].ids)), None)
        if row is None:
            rows.append([])
            room.append(capacity)
            row = len(rows) - 1
        rows[row].append(i)
        room[row] -= len(examples[i].ids)
    width = capacity - min(room)
    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    segment_ids = torch.zeros((len(rows), width), dtype=torch.long)
    loss_mask = torch.zeros((len(rows), width), dtype=torch.bool)
    for r, members in enumerate(rows):
        at = 0
        for i in members:
            ids = examples[i].ids
            input_ids[r, at:at + len(ids)] = torch.tensor(ids)
            segment_ids[r, at:at + len(ids)] = i + 1
            loss_mask[r, at + examples[i].prompt_len:at + len(ids)] = True
            at += len(ids)
    return input_ids.to(device), segment_ids.to(device), loss_mask.to(device)


def packed_token_mean_nll(model, input_ids, segment_ids, loss_mask) -> torch.Tensor:
    """`token_mean_nll` of packed rows (`pack`): the same value as for the examples padded one
    per row, from hidden states projected to the vocabulary only where a target is scored."""
    targets = loss_mask[:, 1:]
    hidden = model.hidden_states(input_ids, segment_ids=segment_ids)[:, :-1][targets]
    logits = model.logits_at(hidden)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    return F.cross_entropy(logits, input_ids[:, 1:][targets], reduction="mean")


def epoch_batches(lengths: list[int], batch_size: int, seed: int, epoch: int,
                  sort_by_length: bool) -> list[list[int]]:
    """One epoch's batches, a function of (seed, epoch) alone so a resumed run replays them.

    Sorting puts examples of similar length together (less padding); the batch order is then
    shuffled, so training does not march from long examples to short ones.
    """
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(lengths)).tolist()
    if not sort_by_length:
        return batches(order, batch_size)
    order = [order[i] for i in length_sorted([lengths[i] for i in order])]
    groups = batches(order, batch_size)
    return [groups[i] for i in rng.permutation(len(groups))]


def token_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Log-probability of each next token: (batch, time - 1); entry t scores token t + 1."""
    logits = model(input_ids, attention_mask)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # float64 stays float64
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


def token_mean_nll(model, input_ids, attention_mask, loss_mask) -> torch.Tensor:
    """Mean negative log-likelihood over every target token of the batch, as language-model
    pretraining averages: a long worked answer weighs by its length, not as one example."""
    targets = loss_mask[:, 1:].float()
    nll = -token_logprobs(model, input_ids, attention_mask) * targets
    return nll.sum() / targets.sum().clamp(min=1)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def random_states() -> dict:
    states = {"python": random.getstate(), "numpy": np.random.get_state(),
              "torch": torch.get_rng_state()}
    if torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_random_states(states: dict) -> None:
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"].cpu())
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([state.cpu() for state in states["cuda"]])


def files_digest(paths) -> str:
    """sha256 over the contents of `paths`: files, or every file in a directory by its relative
    name (hidden staging or backup copies excepted)."""
    digest = hashlib.sha256()
    for path in map(Path, paths):
        if path.is_dir():
            files = sorted((f.relative_to(path).as_posix(), f) for f in path.rglob("*")
                           if f.is_file() and not any(part.startswith(".")
                                                      for part in f.relative_to(path).parts))
        else:
            files = [("", path)]
        for name, file in files:
            digest.update(name.encode() + b"\0")
            with open(file, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 24), b""):
                    digest.update(chunk)
    return digest.hexdigest()


def run_identity(stage: str, settings: dict, data: list, start) -> dict:
    """What a training run is: the settings of its call, its training data, the weights it
    starts from, and the code of its stage module (`stage`: the module's `__name__`; its
    `code_hash`, imports included)."""
    identity = {"stage": stage.rsplit(".", 1)[-1], "settings": settings, "data": files_digest(data),
                "start": files_digest([start]), "code": code_hash(stage)}
    return json.loads(json.dumps(identity, sort_keys=True, default=str))


def claim_work_dir(work_dir, identity: dict) -> None:
    """Keep `work_dir`'s checkpoint only if it belongs to the run `identity` describes.

    Otherwise the folder is discarded and one log line says which part of the identity changed,
    so a rerun after a change of settings, data, starting weights or code starts afresh instead
    of resuming training that no longer applies.
    """
    work_dir = Path(work_dir)
    marker = work_dir / IDENTITY_FILE
    if work_dir.exists():
        previous = read_json(marker) if marker.is_file() else None
        if previous == identity:
            return
        changed = ([key for key in identity if previous.get(key) != identity[key]]
                   if isinstance(previous, dict) else ["no record of its run"])
        print(f"{work_dir}: discarding checkpoints of another run (changed: "
              f"{', '.join(changed)}); starting afresh", flush=True)
        shutil.rmtree(work_dir)
    write_json(identity, marker)


def save_training_state(directory, model, optimizer, step: int, source, extra: dict | None = None):
    """Checkpoint `directory/step-{step:06d}`: HF-format weights + optimizer, step, random states.

    Written to a staging name and renamed, so a kill mid-save leaves the previous checkpoint as
    the latest complete one; once the new one is complete the older ones are removed (only the
    latest is ever resumed).
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
    for old in directory.glob("step-*"):
        if old != final:
            shutil.rmtree(old)
    return final


def latest_checkpoint(directory) -> Path | None:
    complete = sorted(p for p in Path(directory).glob("step-*") if (p / STATE_FILE).is_file())
    return complete[-1] if complete else None


def resume(directory, optimizer_factory, dtype: str, device) -> tuple | None:
    """(model, optimizer, step, extra) from the latest checkpoint in `directory`, or None.

    Everything is loaded onto `device` (each rank's own GPU in a multi-rank run), not where it
    was saved from.
    """
    checkpoint = latest_checkpoint(directory)
    if checkpoint is None:
        return None
    model = load_model(checkpoint, dtype=dtype, device=device)
    optimizer = optimizer_factory(model)
    state = torch.load(checkpoint / STATE_FILE, weights_only=False, map_location=device)
    optimizer.load_state_dict(state["optimizer"])
    restore_random_states(state["random"])
    print(f"resumed from {checkpoint} (step {state['step']})", flush=True)
    return model, optimizer, state["step"], state["extra"]


def finish_run(work_dir) -> None:
    """Remove a finished run's work folder: its outputs are written, nothing is left to resume."""
    shutil.rmtree(work_dir, ignore_errors=True)


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
