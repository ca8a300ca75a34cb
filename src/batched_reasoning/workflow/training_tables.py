"""The GRPO and distillation tables and their learning curves."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from ..core.io import read_json, read_jsonl
from ..core.plots import moving_average, save_figure, subplots
from .names import student_name
from .tables import (DISTILL_KEYS, GRPO_KEYS, RUN_KEYS, SETUP, load_runs, matching,
                     sequential_baseline, single_rank_scaling, with_interval, with_paired_effect)

def grpo_table(metrics_paths: list[str]) -> pd.DataFrame:
    """One row per run; speedup is sequential's training time over the run's (same setup and
    world size); scaling is the one-rank run's time per step over the run's."""
    runs = load_runs(metrics_paths)
    rows = []
    for _, run in runs.iterrows():
        base = sequential_baseline(runs, run,
                                   ("seed", "model", "dataset", "device", "dtype", "threads",
                                    "world_size"))
        rows.append({k: run[k] for k in GRPO_KEYS} | {
            "time_s": run["train_seconds"],
            "s_per_step": run["train_seconds"] / run["steps"],
            "scaling_vs_1_rank": single_rank_scaling(runs, run, RUN_KEYS),
            "tokens_per_s": run["rollout_tokens_per_second"],
            "gen_s_per_step": run["gen_seconds_per_step"],
            "update_s_per_update": update_seconds_per_update(run),
            "peak_mem_mb": run["peak_memory_mb"],
            "reward_first_quarter": run["reward_first_quarter"],
            "reward_final": run["reward_last_quarter"],
            "eval_acc_before": run["eval_acc_before"],
            **with_interval(run["eval_correct_after"], "eval_acc_after"),
            **with_paired_effect(run["eval_correct_after"], run["eval_correct_before"],
                                 "eval_gain"),
            "skipped_updates": run["skipped_updates"],
            "speedup_vs_sequential": (base["train_seconds"] / run["train_seconds"]
                                      if base is not None else None),
        })
    return pd.DataFrame(rows).sort_values(GRPO_KEYS, ignore_index=True)


def update_seconds_per_update(run) -> float | None:
    """Seconds of a policy update that ran: skipped updates (no advantage) count as no time in
    the per-step mean, so it is spread over the updates that ran (None: none ran)."""
    ran = run["steps"] - run["skipped_updates"]
    return run["update_seconds_per_step"] * run["steps"] / ran if ran else None


def plot_grpo(metrics_paths: list[str], log_paths: list[str], png: str, title: str) -> None:
    """All runs: reward moving average and eval accuracy per step, and time per step split into
    rollout generation and policy update."""
    runs = [read_json(p) for p in metrics_paths]
    several_setups = len({(run["model"], run["dataset"]) for run in runs}) > 1
    several_seeds = len({run["seed"] for run in runs}) > 1
    fig, (reward_ax, eval_ax, time_ax) = subplots(1, 3, figsize=(15, 4))
    names, gen, update = [], [], []
    for run, log_path in zip(runs, log_paths):
        log = pd.read_csv(log_path)
        name = f"{run['device']} {run['strategy']} bs{run['batch_size']}"
        if run["world_size"] > 1:
            name += f" x{run['world_size']} ranks"
        if several_setups:
            name += f" ({run['model']}/{run['dataset']})"
        if several_seeds:
            name += f" seed {run['seed']}"
        steps = log[log["step"] > 0]
        evals = log.dropna(subset=["eval_acc"])
        reward_ax.plot(steps["step"], moving_average(steps["reward_avg"]), label=name)
        eval_ax.plot(evals["step"], evals["eval_acc"], "o-", label=name)
        names.append(name)
        gen.append(run["gen_seconds_per_step"])
        update.append(update_seconds_per_update(run) or 0.0)
        names[-1] += f"\n{run['steps'] - run['skipped_updates']} updates, {run['skipped_updates']} skipped"
    reward_ax.set_ylabel("reward, moving average (10 steps)")
    eval_ax.set_ylabel("eval accuracy (greedy)")
    for ax in (reward_ax, eval_ax):
        ax.set_xlabel("step")
        ax.set_ylim(-0.05, 1.05)
        ax.grid(alpha=0.3)
    reward_ax.legend(fontsize=7)
    time_ax.barh(names, gen, label="rollout generation, per step")
    time_ax.barh(names, update, left=gen, label="policy update, per update that ran")
    time_ax.set_xlabel("seconds (mean)")
    time_ax.tick_params(axis="y", labelsize=7)
    time_ax.legend(fontsize=8)
    fig.suptitle(title)
    save_figure(fig, png)


def evaluations(eval_metrics_paths: list[str]) -> dict[tuple, dict]:
    """{(seed, model, dataset, device): its evaluation's metrics, with each problem's
    correctness (`correct`, from the records.jsonl beside the metrics)}.

    Several files for one key must agree on accuracy (e.g. float32 runs of any strategy);
    disagreeing ones raise rather than have one picked silently.
    """
    found: dict[tuple, dict] = {}
    for path in eval_metrics_paths:
        metrics = read_json(path) | {"path": str(path)}
        metrics["correct"] = [int(r["correct"])
                              for r in read_jsonl(Path(path).with_name("records.jsonl"))]
        key = (metrics["seed"], metrics["model"], metrics["dataset"], metrics["device"])
        if key in found and found[key]["accuracy"] != metrics["accuracy"]:
            raise ValueError(f"{key}: accuracy {found[key]['accuracy']} in {found[key]['path']} "
                             f"but {metrics['accuracy']} in {path}; pass one evaluation per model")
        found[key] = metrics
    return found


def distill_table(metrics_paths: list[str],
                  evaluated: dict[tuple, dict] | None = None) -> pd.DataFrame:
    """One row per distillation run: cost (time, tokens/s, padding, memory) and effect (losses,
    and the student's accuracy against its base's on the same problems, paired).

    `evaluated` maps (seed, model name, dataset, device) to evaluation metrics (`evaluations`), for
    base models and students (named by `student_name`) alike; runs it does not cover get empty
    accuracy cells. `student_truncated` counts the student's answers cut off by the generation
    budget, which must fit the traces it learned to write.
    """
    evaluated = evaluated or {}
    missing = {"accuracy": math.nan, "truncated": math.nan}
    no_effect = {"accuracy_gain": math.nan, "accuracy_gain_lo": math.nan,
                 "accuracy_gain_hi": math.nan}
    runs = load_runs(metrics_paths)
    rows = []
    for _, run in runs.iterrows():
        bs1 = matching(runs, run, ["seed", "model", "dataset", "device", "world_size", "threads"],
                       batch_size=1)
        student = student_name(run["model"], run["batch_size"], run["device"], run["world_size"])
        base = evaluated.get((run["seed"], run["model"], run["dataset"], run["device"]), missing)
        learned = evaluated.get((run["seed"], student, run["dataset"], run["device"]), missing)
        gain = (with_paired_effect(learned["correct"], base["correct"], "accuracy_gain")
                if "correct" in base and "correct" in learned else no_effect)
        rows.append({k: run[k] for k in DISTILL_KEYS} | {
            "student": student,
            "n_train": run["n_train"],
            "time_s": run["train_seconds"],
            "s_per_step": run["train_seconds"] / run["steps"],
            "tokens_per_s": run["tokens_per_second"],
            "speedup_vs_bs1": (run["tokens_per_second"] / bs1["tokens_per_second"]
                               if bs1 is not None else math.nan),
            "scaling_vs_1_rank": single_rank_scaling(
                runs, run, ["seed", "model", "dataset", "device", "batch_size"]),
            "pad_fraction": run["pad_fraction"],
            "pad_fraction_unsorted": run["pad_fraction_unsorted"],
            "peak_mem_mb": run["peak_memory_mb"],
            "initial_val_loss": run["initial_val_loss"],
            "final_val_loss": run["final_val_loss"],
            "dropped_too_long": run["n_too_long"],
            "malformed": run["n_malformed"],
            "base_accuracy": base["accuracy"],
            "student_accuracy": learned["accuracy"],
            **gain,
            "student_truncated": learned.get("truncated", math.nan),
        })
    return pd.DataFrame(rows).sort_values(DISTILL_KEYS[:6], ignore_index=True)


def distill_lines(table: pd.DataFrame) -> list[str]:
    """The fastest run per model, dataset and device, and what it learned."""
    lines = []
    for (seed, model, dataset, device), group in table.groupby(SETUP):
        if len(group) < 2:  # one setting: nothing to call fastest
            continue
        best = group.loc[group["tokens_per_s"].idxmax()]
        which = f" (seed {seed})" if table["seed"].nunique() > 1 else ""
        lines.append(f"- Most tokens/s (one timing each) on **{device}** for {model} / {dataset}{which}: batch size "
                     f"**{best['batch_size']}** on {best['world_size']} rank(s), "
                     f"{best['tokens_per_s']:.0f} tokens/s, final "
                     f"validation loss {best['final_val_loss']:.3f} "
                     f"(from {best['initial_val_loss']:.3f}).")
    return lines


def plot_distill(metrics_paths: list[str], log_paths: list[str], png: str) -> None:
    """Validation loss against examples seen, one panel per model/dataset/device, one line per
    batch size: with the objective equal across sizes, the curves should nearly coincide."""
    runs = [(read_json(m), pd.read_csv(log)) for m, log in zip(metrics_paths, log_paths)]
    panels = sorted({(f"seed {m['seed']}", m["model"], m["dataset"], m["device"]) for m, _ in runs})
    fig, axes = subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        for metrics, log in sorted((r for r in runs if (f"seed {r[0]['seed']}", r[0]["model"],
                                                        r[0]["dataset"], r[0]["device"]) == panel),
                                   key=lambda r: (r[0]["batch_size"], r[0]["world_size"])):
            val = log.dropna(subset=["val_loss"])
            seen = log["examples"].fillna(0).cumsum().loc[val.index]
            ax.plot(seen, val["val_loss"], "o-", markersize=3,
                    label=f"batch size {metrics['batch_size']}, {metrics['world_size']} rank(s) "
                          f"({metrics['train_seconds']:.0f} s)")
        ax.set_title(" / ".join(panel), fontsize=10)
        ax.set_xlabel("training examples seen")
        ax.set_ylabel("validation loss (answer tokens)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Distillation on teacher reasoning traces")
    save_figure(fig, png)
