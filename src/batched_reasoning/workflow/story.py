"""The story of a run: what each stage does to held-out accuracy, per seed and across seeds.

Three effects, each a paired difference on the same held-out problems (`stats`):
- self-consistency: the majority vote minus the first sample;
- GRPO: greedy accuracy after training minus before (with the training reward beside it);
- distillation: the student minus the base model it started from.

A seed's effects come from the stage tables (every strategy and batch size of a stage gives
the same answers in float32, so one run per stage stands for it). Across seeds, each effect's
mean carries a percentile bootstrap interval. `python -m batched_reasoning.workflow.story` runs the
story over seeds and CPU classes (`cpu_class`) and prints one table: the check to run before
claiming an effect holds.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

from ..core.cpu_class import CPU_CLASSES, environment_for
from ..core.plots import save_figure, subplots
from .stats import bootstrap_mean_interval, includes_zero
from .tables import EFFECTS as EFFECT_COLUMNS
from .tables import write_table

SETUP = ["model", "dataset", "device"]
# the stage tables' effect columns (`tables.EFFECTS`), in order, and what each measures
EFFECTS = dict(zip(EFFECT_COLUMNS, ("self-consistency: vote - first sample",
                                    "GRPO: after - before", "distillation: student - base")))


def representative(table: pd.DataFrame, prefer: dict) -> pd.DataFrame:
    """One run per seed and setup: the first in sort order after those matching `prefer`
    (e.g. the sequential run, one rank)."""
    if table.empty:
        return table
    rank = pd.Series(0, index=table.index)
    for column, value in prefer.items():
        if column in table:
            rank += (table[column] != value).astype(int)
    order = table.assign(_rank=rank).sort_values(["_rank", *sorted(prefer), "batch_size"])
    return order.drop_duplicates(["seed", *SETUP]).drop(columns="_rank")


def story_table(self_consistency: pd.DataFrame, grpo: pd.DataFrame,
                distill: pd.DataFrame) -> pd.DataFrame:
    """Per seed and setup: the base accuracy and every effect with its paired interval; then
    one `mean` row per setup with each effect's mean over seeds and its bootstrap interval."""
    parts = [
        representative(self_consistency, {"strategy": "sequential"})[
            ["seed", *SETUP, "vote_gain", "vote_gain_lo", "vote_gain_hi"]],
        representative(grpo, {"strategy": "sequential", "world_size": 1})[
            ["seed", *SETUP, "eval_acc_before", "eval_gain", "eval_gain_lo", "eval_gain_hi",
             "reward_first_quarter", "reward_final"]],
        representative(distill, {"world_size": 1})[
            ["seed", *SETUP, "base_accuracy", "accuracy_gain", "accuracy_gain_lo",
             "accuracy_gain_hi"]],
    ]
    table = parts[0]
    for part in parts[1:]:
        table = table.merge(part, on=["seed", *SETUP], how="outer")
    table = table.sort_values([*SETUP, "seed"], ignore_index=True)
    table["seed"] = table["seed"].astype(str)
    return pd.concat([table, summary_rows(table)], ignore_index=True)


def summary_rows(table: pd.DataFrame, by=tuple(SETUP), label: str = "mean") -> pd.DataFrame:
    """Each effect's mean over the runs of a setup and its bootstrap interval (rows `label`)."""
    rows = []
    for setup, group in table.groupby(list(by)):
        if len(group) < 2:  # one run: its own interval is in its row, a mean would repeat it
            continue
        row = dict(zip(by, setup)) | {"seed": f"{label} of {len(group)}"}
        for effect in EFFECTS:
            values = group[effect].dropna()
            if len(values):
                mean, low, high = bootstrap_mean_interval(values.tolist())
                row |= {effect: mean, f"{effect}_lo": low, f"{effect}_hi": high}
        rows.append(row)
    return pd.DataFrame(rows)


def story_lines(table: pd.DataFrame) -> list[str]:
    """A sentence per effect and setup: in how many runs it is positive, and its mean."""
    lines = []
    runs = table[~table["seed"].astype(str).str.startswith("mean")]
    for setup, group in runs.groupby(SETUP):
        for effect, what in EFFECTS.items():
            values = group[effect].dropna()
            if values.empty:
                continue
            sure = sum(not includes_zero(lo, hi) and value > 0 for value, lo, hi in
                       zip(group[effect], group[f"{effect}_lo"], group[f"{effect}_hi"]))
            lines.append(f"- {' / '.join(setup)}, {what}: positive in {(values > 0).sum()} of "
                         f"{len(values)} runs ({sure} with an interval above 0), mean "
                         f"{values.mean():+.3f}.")
    return lines


def plot_story(table: pd.DataFrame, png: str, title: str = "What each stage does, per run") -> None:
    """One panel per effect: each run's effect with its paired interval, and the mean over
    runs with its bootstrap interval as a band."""
    runs = table[~table["seed"].astype(str).str.startswith("mean")].reset_index(drop=True)
    fig, axes = subplots(1, len(EFFECTS), figsize=(5 * len(EFFECTS), 4), squeeze=False)
    labels = [(f"{row['cpu']} " if "cpu" in runs else "") + f"seed {row['seed']}"
              for _, row in runs.iterrows()]
    for ax, (effect, what) in zip(axes[0], EFFECTS.items()):
        shown = runs[effect].notna()
        x = [i for i, ok in enumerate(shown) if ok]
        values = runs.loc[shown, effect]
        ax.errorbar(x, values, yerr=[values - runs.loc[shown, f"{effect}_lo"],
                                     runs.loc[shown, f"{effect}_hi"] - values],
                    fmt="o", capsize=3, label="run (95% paired interval)")
        if len(values):
            mean, low, high = bootstrap_mean_interval(values.tolist())
            ax.axhline(mean, color="C1", label=f"mean {mean:+.3f}")
            ax.axhspan(low, high, color="C1", alpha=0.2, label="95% bootstrap interval")
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(runs)), labels, rotation=45, fontsize=7)
        ax.set_title(what, fontsize=10)
        ax.set_ylabel("accuracy difference (held-out)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    save_figure(fig, png)


def make_story(inputs: dict, outputs: dict) -> pd.DataFrame:
    """The story table (TSV and Markdown) and plot from the stage tables' TSVs."""
    read = {stage: pd.read_csv(inputs[stage], sep="\t") for stage in
            ("self_consistency", "grpo", "distill")}
    table = story_table(read["self_consistency"], read["grpo"], read["distill"])
    plot_story(table, outputs["plot"])
    write_table(table, outputs["tsv"], outputs["md"],
                "What each stage does on held-out problems", story_lines(table))
    return table


# --- the story check: seeds x CPU classes ---------------------------------------------------

STORY_CONFIG = "configs/story.yaml"


def parse_seeds(text: str) -> list[int]:
    """`0-4` or `0,1,2` (or both: `0-2,7`) as a list of seeds."""
    seeds = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        seeds += list(range(int(low), int(high or low) + 1))
    return seeds


def run_class(repo: Path, workdir: Path, cpu: str, seeds: list[int], cores: int,
              extra: list[str], configfiles: list[str] = ()) -> Path:
    """Run the story config (then `configfiles`) for `seeds` as CPU class `cpu` in `workdir`;
    its story table."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = environment_for(cpu)
    # the story's table only: the batching curves time speed, which the story does not read
    cmd = [sys.executable, "-m", "snakemake", "results/tables/story.tsv",
           "--snakefile", str(repo / "Snakefile"),
           "--directory", str(workdir), "--cores", str(cores),
           # timed jobs of different seeds may overlap: the story reads accuracies, not speeds
           "--resources", f"timing={cores}",
           "--config", f"seeds=[{','.join(map(str, seeds))}]", *extra,
           "--configfile", str(repo / "config.yaml"), str(repo / STORY_CONFIG),
           *map(str, configfiles)]
    print(f"[{cpu}] {' '.join(cmd)}", flush=True)
    subprocess.run(cmd, env=env, check=True)
    return workdir / "results/tables/story.tsv"


def check(repo: Path, out: Path, seeds: list[int], cpus: list[str], cores: int,
          extra: list[str], configfiles: list[str] = ()) -> pd.DataFrame:
    """Every run of seeds x CPU classes, one table: each run's effects and, per setup, each
    effect's mean over all runs with its bootstrap interval."""
    tables = []
    for cpu in cpus:
        table = pd.read_csv(run_class(repo, out / cpu, cpu, seeds, cores, extra, configfiles),
                            sep="\t", dtype={"seed": str})
        tables.append(table[~table["seed"].str.startswith("mean")].assign(cpu=cpu))
    runs = pd.concat(tables, ignore_index=True)
    runs = runs[["cpu", *[c for c in runs.columns if c != "cpu"]]]
    combined = pd.concat([runs, summary_rows(runs)], ignore_index=True)
    write_table(combined, str(out / "story.tsv"), str(out / "story.md"),
                f"Story check: seeds {','.join(map(str, seeds))} x CPU classes {', '.join(cpus)}",
                story_lines(combined))
    plot_story(combined, str(out / "story.png"), "Story check: every run's effects")
    return combined


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m batched_reasoning.workflow.story",
        description="Run the default story (configs/story.yaml: one strategy per stage, the "
                    "default config's effects) for several seeds on several CPU classes, and "
                    "print every run's effects with their intervals.")
    parser.add_argument("--seeds", default="0-4", help="e.g. 0-4 or 0,3,7 (default 0-4)")
    parser.add_argument("--cpu-classes", default="native,avx2",
                        help=f"comma-separated, of: {', '.join(CPU_CLASSES)} (default native,avx2)")
    parser.add_argument("--out", default="story-check", help="working directory (default story-check)")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repo", default=str(Path.cwd()), help="the workflow's checkout")
    parser.add_argument("--configfile", nargs="*", default=[],
                        help="config files merged over the story config")
    args, extra = parser.parse_known_args(argv)
    table = check(Path(args.repo).resolve(), Path(args.out).resolve(), parse_seeds(args.seeds),
                  args.cpu_classes.split(","), args.cores, extra,
                  [str(Path(f).resolve()) for f in args.configfile])
    print((Path(args.out) / "story.md").read_text())
    return table


if __name__ == "__main__":
    main()
