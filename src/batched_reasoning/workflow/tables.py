"""Aggregation: every run's metrics joined into comparison tables (TSV + Markdown) and plots.

Stage modules never import this one, so editing a table reruns only the table rules.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from ..core.io import atomic_path, read_json, read_jsonl
from .names import student_name
from ..core.plots import moving_average, save_figure, subplots
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


# A greedy pick whose top-two logit margin is below this may flip under the rounding that another
# batch size, kernel or mask brings: in float32 logits moved by ~5e-5 between batch 1 and 8 on
# Qwen3-0.6B; bfloat16 and float16 logits around 10-20 have last places of 0.06 and 0.008.
NEAR_TIE_MARGIN = {"float64": 1e-9, "float32": 1e-3, "bfloat16": 0.25, "float16": 0.05}


def compare_answer(tokens: list[int], base_tokens: list[int], base_margins: list[float],
                   dtype: str) -> str:
    """`same`, `near-tie` or `MISMATCH`: an answer against the sequential run's, judged at the
    first token where they part by how close the sequential run's pick there was."""
    if tokens == base_tokens:
        return "same"
    first = next((i for i, (a, b) in enumerate(zip(tokens, base_tokens)) if a != b),
                 min(len(tokens), len(base_tokens)))  # one answer ended where the other went on
    margin = base_margins[first] if first < len(base_margins) else math.inf
    return "near-tie" if margin < NEAR_TIE_MARGIN[dtype] else "MISMATCH"


def markdown(table: pd.DataFrame) -> str:
    """The table in Markdown, with empty cells where values are missing. A value with an
    interval (`x`, `x_lo`, `x_hi`) is one cell, `x [lo, hi]`; an effect whose interval includes
    0 is marked."""
    table = table.copy()
    for column in [c for c in table.columns if f"{c}_lo" in table and f"{c}_hi" in table]:
        effect = column in EFFECTS
        table[column] = [
            "" if pd.isna(value) else
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


def make_table(stage: str, inputs: dict, outputs: dict, skipped: list[dict] = ()) -> pd.DataFrame:
    """A stage's comparison table (TSV and Markdown) and plot from its runs' files."""
    probes = list(inputs.get("autotune", []))
    if stage == "autotune":
        table = autotune_table(probes)
        plot_autotune(probes, outputs["plot"])
        write_table(table, outputs["tsv"], outputs["md"], "Batch sizes chosen by auto",
                    autotune_lines(probes))
        return table
    if stage in ("evaluate", "self_consistency_curve"):
        from . import curve  # it builds on this module's helpers
        accuracy = (curve.accuracies(inputs["metrics"], inputs["records"])
                    if stage == "evaluate" else None)
        table = curve.curve_table(inputs["points"], inputs["point_records"],
                                  inputs["point_problems"], accuracy, skipped)
        greedy = stage == "evaluate"
        curve.plot_curve(table, outputs["plot"], "Batched generation: throughput, latency, memory"
                         if greedy else "Self-consistency: sequences in flight",
                         panels=4 if greedy else 2)
        title = "The batching curve" + ("" if greedy else " of self-consistency")
        table = with_autotune(table, probes)
        write_table(table, outputs["tsv"], outputs["md"], title,
                    curve.curve_lines(table, "problems" if greedy else "problems x samples"),
                    shown=curve.compact(table))
        return table
    if stage == "workload":
        from . import curve
        table = curve.workload_table(inputs["points"], inputs["point_records"])
        curve.plot_workload(inputs["points"], inputs["point_records"], outputs["plot"])
        write_table(table, outputs["tsv"], outputs["md"], "The timed workload's shape",
                    curve.workload_lines(table), shown=curve.workload_view(table))
        return table
    if stage == "self_consistency":
        table = self_consistency_table(inputs["metrics"], inputs["records"], skipped)
        plot_self_consistency(table, inputs["records"], outputs["plot"])
        title, notes = "Self-consistency (majority vote)", skipped_lines(table)
    elif stage == "grpo":
        table = grpo_table(inputs["metrics"])
        plot_grpo(inputs["metrics"], inputs["logs"], outputs["plot"],
                  "GRPO: learning curves and time per step")
        title, notes = "GRPO with batched rollouts", []
    elif stage == "distill":
        table = distill_table(inputs["metrics"], evaluations(inputs["evaluations"]))
        plot_distill(inputs["metrics"], inputs["logs"], outputs["plot"])
        title, notes = "Distillation on teacher reasoning traces", distill_lines(table)
    else:
        raise ValueError(f"no table for stage {stage!r}")
    table = with_autotune(table, probes)
    write_table(table, outputs["tsv"], outputs["md"], title, notes)
    return table
