"""What every comparison table is made with: the runs' keys, baselines, intervals and paired
effects, the near-tie test of two answers, and the TSV + Markdown writer. Each family of tables
builds on it (`curve`, `sampling_table`, `training_tables`, `autotune_table`, `appendix_e`);
`stage_tables` makes a stage's table.

Stage modules never import these, so editing a table reruns only the table rules.
"""

from __future__ import annotations

import pandas as pd

from ..core.io import atomic_path, read_json
from .stats import includes_zero, paired_difference, wilson_interval

RUN_KEYS = ["seed", "model", "dataset", "strategy", "batch_size", "device", "dtype", "threads"]
GRPO_KEYS = RUN_KEYS + ["world_size"]
DISTILL_KEYS = ["seed", "model", "dataset", "batch_size", "device", "world_size", "dtype",
                "threads"]
# A run's setup within a seed: runs that differ only in strategy, batch size or ranks.
SETUP = ["seed", "model", "dataset", "device"]
# Paired effects of a stage on the same held-out problems, each with a 95% interval (`_lo`,
# `_hi`); a Markdown table marks those whose interval includes 0.
EFFECTS = ("vote_gain", "eval_gain", "accuracy_gain")
NO_EFFECT_MARK = "†"
NO_EFFECT_NOTE = f"{NO_EFFECT_MARK} the effect's 95% interval includes 0: these problems cannot tell it from none."


def load_runs(metrics_paths: list[str]) -> pd.DataFrame:
    """One row per run: its metrics.json (`threads`: None for runs recorded before it was)."""
    return pd.DataFrame([{"threads": None} | read_json(p) for p in metrics_paths])


def sequential_baseline(runs: pd.DataFrame, run: pd.Series,
                        same_setup=("seed", "model", "dataset", "device", "dtype", "threads")
                        ) -> pd.Series | None:
    """The `sequential` run of the same seed, model, dataset, device, dtype and thread count as
    `run` (a time at another thread count measures the machine's setting, not the strategy)."""
    return matching(runs, run, list(same_setup), strategy="sequential")


def matching(runs: pd.DataFrame, run: pd.Series, same: list[str], **fixed) -> pd.Series | None:
    """The first run agreeing with `run` on the `same` columns and having the `fixed` values
    (runs without a value, e.g. no seed, agree with each other)."""
    target = [run[c] for c in same]
    agree = [all(a == b or (pd.isna(a) and pd.isna(b)) for a, b in zip(row, target))
             for row in runs[same].itertuples(index=False)]
    found = runs[agree]
    for key, value in fixed.items():
        found = found[found[key] == value]
    return None if found.empty else found.iloc[0]


def single_rank_scaling(runs: pd.DataFrame, run: pd.Series, same: list[str]) -> float | None:
    """Time per step of the same run on one rank over this run's (data-parallel speedup)."""
    single = matching(runs, run, same, world_size=1)
    if single is None:
        return None
    return (single["train_seconds"] / single["steps"]) / (run["train_seconds"] / run["steps"])


def with_skipped(rows: list[dict], skipped: list[dict]) -> pd.DataFrame:
    """Runs and the runs the memory budget left out (their prediction and a note), sorted."""
    table = pd.DataFrame([r | {"note": ""} for r in rows] + list(skipped))
    table = table.reindex(columns=list(dict.fromkeys(RUN_KEYS + list(table.columns))))
    return table.sort_values(RUN_KEYS, ignore_index=True)


def with_interval(correct: list, prefix: str) -> dict:
    """`prefix`, `prefix_lo`, `prefix_hi`: an accuracy over per-problem correctness and its 95%
    Wilson interval."""
    low, high = wilson_interval(int(sum(correct)), len(correct))
    return {prefix: sum(correct) / len(correct), f"{prefix}_lo": low, f"{prefix}_hi": high}


def with_paired_effect(after: list, before: list, name: str) -> dict:
    """`name`, `name_lo`, `name_hi`: mean per-problem `after - before` and its paired interval."""
    mean, low, high = paired_difference(after, before)
    return {name: mean, f"{name}_lo": low, f"{name}_hi": high}


def markdown(table: pd.DataFrame) -> str:
    """The table in Markdown, with empty cells where values are missing. A value with an
    interval (`x`, `x_lo`, `x_hi`) is one cell, `x [lo, hi]`; an effect whose interval includes
    0 is marked."""
    table = table.copy()
    for column in [c for c in table.columns if f"{c}_lo" in table and f"{c}_hi" in table]:
        effect = column in EFFECTS
        table[column] = [
            "" if pd.isna(value) else
            f"{value:.3f} (no interval)" if pd.isna(low) else
            (f"{value:+.3f} [{low:+.3f}, {high:+.3f}]" if effect else
             f"{value:.3f} [{low:.3f}, {high:.3f}]")
            + (f" {NO_EFFECT_MARK}" if effect and not pd.isna(value) and includes_zero(low, high)
               else "")
            for value, low, high in zip(table[column], table[f"{column}_lo"], table[f"{column}_hi"])]
        table = table.drop(columns=[f"{column}_lo", f"{column}_hi"])
    return table.astype(object).where(table.notna(), None).to_markdown(
        index=False, floatfmt=".4g", missingval="")


def skipped_lines(table: pd.DataFrame) -> list[str]:
    if table.get("note", pd.Series(dtype=str)).astype(str).str.startswith("skipped").any():
        return ["- Runs marked *skipped* were predicted not to fit the device's "
                "`memory_budget_mb` and were not run."]
    return []


def write_table(table: pd.DataFrame, tsv: str, md: str, title: str, notes: list[str],
                shown: pd.DataFrame | None = None) -> None:
    """The table as TSV, and as Markdown (`shown`: the columns to read, default all) under
    `title` with `notes` below it; the note on effects that include 0 only where one does."""
    shown = table if shown is None else shown
    text = markdown(shown)
    if NO_EFFECT_MARK in text:
        notes = [*notes, NO_EFFECT_NOTE]
    with atomic_path(tsv) as tmp:
        table.to_csv(tmp, sep="\t", index=False, float_format="%.4g")
    with atomic_path(md) as tmp:
        tmp.write_text("\n".join([f"# {title}", "", text, "", *notes]) + "\n")
