"""The self-consistency table: each run's vote against its first sample, and its cost."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..core.io import read_json, read_jsonl
from ..core.plots import save_figure, subplots
from .tables import (RUN_KEYS, load_runs, sequential_baseline, with_interval, with_paired_effect,
                     with_skipped)

def self_consistency_table(metrics_paths: list[str], records_paths: list[str],
                           skipped: list[dict] = ()) -> pd.DataFrame:
    """One row per run, compared with the sequential run of the same model, data and device;
    `skipped` runs get a row and a note."""
    runs = load_runs(metrics_paths)
    records = [read_jsonl(p) for p in records_paths]
    runs["winners"] = [[r["winner"] for r in run] for run in records]
    runs["correct"] = [[int(r["correct"]) for r in run] for run in records]
    runs["first_correct"] = [[int(r["first_sample_correct"]) for r in run] for run in records]
    rows = []
    for _, run in runs.iterrows():
        base = sequential_baseline(runs, run)
        row = {k: run[k] for k in RUN_KEYS} | {
            "num_samples": run["num_samples"],
            **with_interval(run["correct"], "vote_accuracy"),
            "first_sample_accuracy": run["first_sample_accuracy"],
            **with_paired_effect(run["correct"], run["first_correct"], "vote_gain"),
            "mean_agreement": run["mean_agreement"],
            "samples_used": run["samples_used"],
            "samples_saved": run["samples_saved"],
            "prefills": run["prefills"],
            "time_s": run["wall_seconds"],
            "tokens_per_s": run["tokens_per_second"],
            "peak_mem_mb": run["peak_memory_mb"],
            "kv_cache_mb": run.get("kv_cache_mb"),
        }
        if base is None:
            row |= {"speedup_vs_sequential": None, "votes_match_sequential": "no baseline"}
        else:
            row["speedup_vs_sequential"] = run["tokens_per_second"] / base["tokens_per_second"]
            same = [a == b for a, b in zip(run["winners"], base["winners"])]
            if all(same):
                row["votes_match_sequential"] = "yes"
            elif run["dtype"] == "float32":
                row["votes_match_sequential"] = "MISMATCH"
            else:  # reduced precision: batching changes rounding, so some samples differ
                row["votes_match_sequential"] = f"{sum(same) / len(same):.0%} agree"
        rows.append(row)
    return with_skipped(rows, skipped)


def plot_self_consistency(table: pd.DataFrame, records_paths: list[str], png: str) -> None:
    """Vote accuracy against k samples, one line per model, dataset, device and seed (every
    strategy and batch size draws the same samples). Its speed is the curve's
    (`self_consistency_curve.png`)."""
    fig, votes = subplots(1, 1, figsize=(6, 4))
    shown = set()
    for path in sorted(records_paths):
        metrics = read_json(Path(path).with_name("metrics.json"))
        setup = (metrics["model"], metrics["dataset"], metrics["device"], f"seed {metrics['seed']}")
        if setup in shown:
            continue
        shown.add(setup)
        k = range(1, metrics["num_samples"] + 1)
        votes.plot(k, metrics["accuracy_at_k"], "o-", label=" / ".join(setup))
    votes.xaxis.get_major_locator().set_params(integer=True)
    votes.set_xlabel("samples voted on (k)")
    votes.set_ylabel("vote accuracy")
    votes.set_ylim(-0.02, 1.02)
    votes.grid(alpha=0.3)
    if shown:
        votes.legend(fontsize=8)
    fig.suptitle("Self-consistency: accuracy by samples voted on")
    save_figure(fig, png)
