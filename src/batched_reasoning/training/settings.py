"""Where a training stage writes (its settings are a `core.settings.Settings`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TrainingFiles:
    """Where a training run writes: the trained model's folder, its per-step log, its curve,
    its metrics, and the work folder that holds its resumable checkpoint."""

    model: str
    log_csv: str
    curve_png: str
    metrics_json: str
    work_dir: str
