"""Figures: one way to get matplotlib's headless backend, one moving average, atomic PNGs."""

from __future__ import annotations

import os

import pandas as pd

from .io import atomic_path


def subplots(*args, **kwargs):
    """`matplotlib.pyplot.subplots` on the Agg backend (jobs and tests have no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(*args, **kwargs)


def moving_average(values: pd.Series, window: int = 10) -> pd.Series:
    return values.rolling(window, min_periods=1).mean()


def save_figure(fig, path: str | os.PathLike) -> None:
    """Write a figure as PNG atomically and free it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
