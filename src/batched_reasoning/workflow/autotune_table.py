"""What each `auto` probe measured, and which runs ran at the size it chose."""

from __future__ import annotations

import pandas as pd

from ..core.io import read_json
from ..core.plots import save_figure, subplots
from .tables import SETUP

def with_autotune(table: pd.DataFrame, probe_paths: list[str]) -> pd.DataFrame:
    """`batch_size_from`: `auto → N` on the runs at the size their setup's probe chose."""
    if not probe_paths:
        return table
    chosen = {(p["seed"], p["model"], p["dataset"], p["device"]): p["batch_size"]
              for p in map(read_json, probe_paths)}
    marks = ["" if row.get("strategy") == "sequential" or pd.isna(row["batch_size"]) else
             f"auto → {int(row['batch_size'])}"
             if chosen.get(tuple(row[c] for c in SETUP)) == row["batch_size"] else ""
             for _, row in table.iterrows()]
    table.insert(list(table.columns).index("batch_size") + 1, "batch_size_from", marks)
    return table


def autotune_table(probe_paths: list[str]) -> pd.DataFrame:
    """One row per probed batch size: its throughput (median and spread of the repeats), peak
    memory and status, the chosen one marked."""
    rows = []
    for probe in map(read_json, probe_paths):
        for trial in probe["trials"]:
            rows.append({
                "seed": probe["seed"], "stage": probe["stage"], "model": probe["model"],
                "dataset": probe["dataset"], "device": probe["device"],
                "batch_size": trial["batch_size"], "status": trial["status"],
                "tokens_per_s": trial["median_tokens_per_second"] or None,
                "spread": trial["spread"] if trial["tokens_per_second"] else None,
                "peak_mem_mb": trial["peak_memory_mb"], "budget_mb": probe["budget_mb"],
                "chosen": "auto → this" if trial["batch_size"] == probe["batch_size"] else "",
                "trial_s": trial["seconds"], "note": trial["note"],
            })
    return pd.DataFrame(rows)


def autotune_lines(probe_paths: list[str]) -> list[str]:
    lines = []
    for probe in map(read_json, probe_paths):
        lines.append(
            f"- **{probe['stage']}**, {probe['model']} / {probe['dataset']} on "
            f"{probe['device']} ({probe['device_name']}, seed {probe['seed']}): auto → "
            f"**{probe['batch_size']}**: {probe['why']}. Stopped: {probe['stopped']}. Budget: "
            f"{probe['budget_source']}.")
    return lines


def plot_autotune(probe_paths: list[str], png: str) -> None:
    """Per probe, throughput and peak memory against batch size, the chosen size marked: where
    batching stops paying on this device, and what it costs in memory."""
    probes = [read_json(p) for p in probe_paths]
    fig, axes = subplots(1, len(probes), figsize=(5 * len(probes), 4), squeeze=False)
    for ax, probe in zip(axes[0], probes):
        ran = [t for t in probe["trials"] if t["tokens_per_second"]]
        sizes = [t["batch_size"] for t in ran]
        ax.plot(sizes, [t["median_tokens_per_second"] for t in ran], "o-", color="C0")
        ax.set_ylabel(probe["unit"], color="C0")
        memory = ax.twinx()
        measured = [t for t in probe["trials"] if t["peak_memory_mb"] is not None]
        memory.plot([t["batch_size"] for t in measured], [t["peak_memory_mb"] for t in measured],
                    "s--", color="C1")
        memory.axhline(probe["budget_mb"] * (1 - probe["thresholds"]["headroom"]), color="C1",
                       alpha=0.4, linestyle=":")
        memory.set_ylabel("peak memory (MB); dotted: budget less headroom", color="C1")
        memory.set_ylim(bottom=0)  # a few MB of growth must not look like a cliff
        ax.axvline(probe["batch_size"], color="C2", alpha=0.6)
        ax.set_xscale("log", base=2)
        ax.set_xlabel(f"batch size (chosen: {probe['batch_size']})")
        ax.set_title(f"{probe['stage']}: {probe['model']} on {probe['device']}", fontsize=9)
        ax.grid(alpha=0.3)
    fig.suptitle("batch_sizes: auto, what each probe measured")
    save_figure(fig, png)
