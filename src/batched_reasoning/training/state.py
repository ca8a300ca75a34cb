"""Resumable training state and the run identity that guards it.

The state: weights in the library's HF format plus optimizer, step counter and every random
state, so a killed job continues exactly where its last checkpoint left off. The identity, one
for all three training stages: a work folder's checkpoint is resumed only by the run that wrote
it (same settings, training data, starting weights and code), never by a rerun after any of them
changed.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from pathlib import Path

import numpy as np
import torch

from ..core.io import atomic_path, read_json, write_json
from ..core.provenance import code_hash
from ..model.checkpoint import load_model, save_model

STATE_FILE = "trainer_state.pt"


IDENTITY_FILE = "run.json"


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
