"""The batching curves: every timed point of a stage joined into one table and one figure.

Each row is a strategy at a batch size, with the median of its repeats and a 95% interval
(`core.timing`). A row is compared only with rows of the same seed, model, dataset, device,
dtype, thread count and machine: a speedup or a `best` across thread counts would compare the
machine's settings, not the strategies.
"""

from __future__ import annotations

import math

import pandas as pd

from .names import machine_label
from ..core.io import read_json, read_jsonl
from ..core.plots import save_figure, subplots
from ..core.timing import INTERVAL_REPEATS, Summary, summarize, winner
from ..data.grading import correct_answers
from ..engine.agreement import compare_answer, verdict
from .tables import with_interval

# Rows that may be compared with each other.
SAME_SETUP = ["seed", "model", "dataset", "device", "dtype", "threads", "machine"]
KEYS = SAME_SETUP + ["strategy", "batch_size"]
TIMED = ("tokens_per_s", "completion_p50_s", "completion_p95_s",
         "completion_p99_s", "service_p50_s", "ttft_p50_s", "tpot_p50_ms", "decode_step_ms",
         "decode_share", "wall_s")
COMPACT = {"machine": "machine", "model": "model", "device": "device", "threads": "threads",
           "strategy": "strategy", "decode": "decode", "graphs": "graphs",
           "compile_s": "compile s",
           "batch_size": "batch size", "batch_size_from": "chosen by",
           "tokens_per_s": "tokens/s [95%]",
           "completion_p50_s": "p50 latency s", "completion_p99_s": "p99 latency s",
           "ttft_p50_s": "p50 TTFT s", "peak_mem_mb": "peak MB", "accuracy": "accuracy",
           "correct_per_s": "correct/s", "pct_of_bound": "% of bound",
           "speedup": "× sequential", "best": "best"}


def points(metrics_paths: list[str], records_paths: list[str],
           problems_paths: list[str | None] | None = None) -> pd.DataFrame:
    """One row per strategy of every point: its keys, each timed number's median and interval
    (`x`, `x_lo`, `x_hi`), memory, workload shape and its answers (`outputs`, `margins`); given
    a point's problems, its answers graded (`graded`)."""
    rows = []
    for index, (metrics_path, records_path) in enumerate(zip(metrics_paths, records_paths)):
        point = read_json(metrics_path)
        records = read_jsonl(records_path)
        problems = (read_jsonl(problems_paths[index])
                    if problems_paths and problems_paths[index] else None)
        for run in point["runs"]:
            mine = [r for r in records if r["strategy"] == run["strategy"]]
            row = {"seed": int(point["seed"]), "model": point["model"],
                   "dataset": point["dataset"], "device": point["device"],
                   "dtype": point["dtype"], "threads": point["threads"],
                   "machine": machine_label(point["machine"]),
                   "strategy": run["strategy"], "batch_size": run["batch_size"],
                   "repeats": run["repeats"], "n_prompts": point["n_prompts"],
                   "greedy": point["temperature"] == 0,
                   # how decode steps ran (`engine.compiled`); older runs were all eager
                   "decode": run.get("decode_mode", "eager"), "graphs": run.get("graphs", 0),
                   "compile_s": run.get("compile_seconds", 0.0)}
            for name in TIMED:  # too few repeats: no interval (`core.timing.INTERVAL_REPEATS`)
                summary = run["summaries"][name]
                bounded = run["repeats"] >= INTERVAL_REPEATS
                row |= {name: summary["median"],
                        f"{name}_lo": summary["low"] if bounded else math.nan,
                        f"{name}_hi": summary["high"] if bounded else math.nan}
            row |= {
                "spread": Summary(**run["summaries"]["tokens_per_s"]).relative_half_width,
                "peak_mem_mb": run["peak_memory_mb"], "kv_cache_mb": run["kv_cache_mb"],
                "predicted_mem_mb": run["predicted_peak_memory_mb"],
                "memory_model_error": run["predicted_peak_memory_mb"] / run["peak_memory_mb"] - 1,
                "memory_measure": run["memory_measure"],
                **{f"prompt_{k}": v for k, v in run["prompt_length"].items()},
                **{f"answer_{k}": v for k, v in run["answer_length"].items()},
                "pad_fraction": run["pad_fraction"],
                "finished_row_share": run["finished_row_share"],
                "truncated": run["truncated"],
                "bound_tokens_per_s": run["bound_tokens_per_s"], "bound_by": run["bound_by"],
                "pct_of_bound": 100 * median_of(run, "tokens_per_s") / run["bound_tokens_per_s"],
                "outputs": [r["generated_ids"] for r in mine],
                "margins": [r["margins"] for r in mine],
                "draws": [r.get("draws", []) for r in mine],
            }
            if problems is not None:
                row |= graded(run, mine, problems, point["num_samples"])
            rows.append(row)
    return pd.DataFrame(rows)


def graded(run: dict, answers: list[dict], problems: list[dict], num_samples: int) -> dict:
    """A timed run's accuracy on its problems and its goodput (correct answers per second, per
    repeat), graded here rather than when timed: a change to the grader times nothing again."""
    keys = [tuple(a["key"]) for a in answers]
    right = correct_answers(problems, keys, [a["generated_text"] for a in answers], num_samples)
    goodput = summarize([sum(right) / repeat["wall_s"] for repeat in run["samples"]])
    return {"subset_accuracy": sum(right) / len(right), "correct_per_s": goodput.median,
            "correct_per_s_lo": goodput.low, "correct_per_s_hi": goodput.high}


def median_of(run: dict, name: str) -> float:
    return run["summaries"][name]["median"]


def matches_sequential(row: pd.Series, base: pd.Series | None) -> str:
    """`yes`, or how many answers part from the one-at-a-time run's by a near-tie (a pick a
    rounding away from changing, with the same random numbers where sampled) and how many not.
    Each sampled row's random stream is its own (keyed), so batching must not change it."""
    if base is None:
        return "no baseline"
    draws = row["draws"] if not row["greedy"] else [None] * len(row["outputs"])
    base_draws = base["draws"] if not row["greedy"] else [None] * len(base["outputs"])
    return verdict([compare_answer(tokens, base_tokens, margins, row["dtype"], mine, theirs)
                    for tokens, base_tokens, margins, mine, theirs
                    in zip(row["outputs"], base["outputs"], base["margins"], draws, base_draws)])


def accuracies(metrics_paths: list[str], records_paths: list[str]) -> dict[tuple, dict]:
    """(seed, model, dataset, device) -> accuracy over the whole split, with its interval."""
    found = {}
    for metrics_path, records_path in zip(metrics_paths, records_paths):
        metrics = read_json(metrics_path)
        correct = [int(r["correct"]) for r in read_jsonl(records_path)]
        key = (int(metrics["seed"]), metrics["model"], metrics["dataset"], metrics["device"])
        found[key] = with_interval(correct, "accuracy") | {"accuracy_problems": len(correct)}
    return found


def best_marks(table: pd.DataFrame) -> pd.Series:
    """`best` on the row whose tokens/s interval is clear of every other row of its setup,
    `tie` on the rows that tie for best, empty elsewhere (and on a setup of one row)."""
    marks = pd.Series("", index=table.index, dtype=object)
    for _, group in table.groupby(SAME_SETUP):
        summaries = {index: Summary(row["tokens_per_s"], row["tokens_per_s_lo"],
                                    row["tokens_per_s_hi"], row["repeats"])
                     for index, row in group.iterrows()}
        if any(math.isnan(s.low) for s in summaries.values()):
            continue  # too few repeats to rank
        best, tied = winner(summaries)
        for index in tied:
            marks[index] = "best" if index == best else "tie"
    return marks


def curve_table(metrics_paths: list[str], records_paths: list[str],
                problems_paths: list[str | None] | None = None,
                accuracy: dict[tuple, dict] | None = None, skipped: list[dict] = ()) -> pd.DataFrame:
    """Every point's strategies, each against the one-at-a-time run of its setup: speedup with
    its interval, whether its answers equal that run's, the best or tied rows marked."""
    table = points(metrics_paths, records_paths, problems_paths)
    if table.empty:  # every point skipped (memory budget), or none asked for
        return pd.DataFrame(list(skipped), columns=list(dict.fromkeys(
            KEYS + ["tokens_per_s", "note"] + [k for row in skipped for k in row])))
    rows = []
    for _, row in table.iterrows():
        same = table[(table[SAME_SETUP] == row[SAME_SETUP]).all(axis=1)
                     & (table["strategy"] == "sequential")]
        base = None if same.empty else same.iloc[0]
        extra = (accuracy or {}).get((row["seed"], row["model"], row["dataset"], row["device"]), {})
        speedup = {"speedup": None, "speedup_lo": None, "speedup_hi": None}
        if base is not None:  # the ratio's interval from its parts' (conservative)
            speedup = {"speedup": row["tokens_per_s"] / base["tokens_per_s"],
                       "speedup_lo": row["tokens_per_s_lo"] / base["tokens_per_s_hi"],
                       "speedup_hi": row["tokens_per_s_hi"] / base["tokens_per_s_lo"]}
        rows.append(row.to_dict() | extra | speedup
                    | {"matches_sequential": matches_sequential(row, base)})
    table = pd.DataFrame(rows).drop(columns=["outputs", "margins", "draws"])
    table = table.sort_values(KEYS, ignore_index=True)
    table["best"] = best_marks(table)
    if skipped:
        table = pd.concat([table.assign(note=""), pd.DataFrame(list(skipped))],
                          ignore_index=True)
    return table


def compact(table: pd.DataFrame) -> pd.DataFrame:
    """The columns a person compares, the tokens/s with its interval in one cell."""
    shown = table.copy()
    if shown["tokens_per_s"].isna().all():
        return shown[[c for c in ("strategy", "batch_size", "note") if c in shown]]
    shown["tokens_per_s"] = [
        "" if pd.isna(value) else f"{value:.0f} (no interval)" if pd.isna(low) else
        f"{value:.0f} [{low:.0f}, {high:.0f}]" for value, low, high
        in zip(shown["tokens_per_s"], shown["tokens_per_s_lo"], shown["tokens_per_s_hi"])]
    if "accuracy" not in shown and "subset_accuracy" in shown:
        shown["accuracy"] = shown["subset_accuracy"]
    if shown["speedup"].isna().all():
        shown = shown.drop(columns="speedup")
    for column in ("machine", "model", "device", "threads"):  # one value: said in the notes
        if shown[column].nunique() == 1:
            shown = shown.drop(columns=column)
    if shown["decode"].fillna("eager").eq("eager").all():  # nothing compiled: no such columns
        shown = shown.drop(columns=["decode", "graphs", "compile_s"])
    columns = [c for c in COMPACT if c in shown] + (["note"] if "note" in shown else [])
    return shown[columns].rename(columns=COMPACT)


def bound_summary(table: pd.DataFrame) -> str:
    """Which limit bounds decoding at which batch sizes."""
    parts = []
    for limit, group in table.groupby("bound_by"):
        sizes = sorted(set(group["batch_size"]))
        parts.append(f"{limit}-bound at batch size {', '.join(map(str, sizes))}")
    return "; ".join(parts)


def curve_lines(table: pd.DataFrame, unit: str) -> list[str]:
    """What the table's rows share, and per setup the best row or the rows that tie."""
    skipped = table[table["tokens_per_s"].isna()]
    table = table[table["tokens_per_s"].notna()]
    skip_note = ["- Rows marked *skipped* were predicted not to fit the device's "
                 "`memory_budget_mb` and were not run."] if not skipped.empty else []
    if table.empty:
        return ["No point of this curve was timed."] + skip_note
    first = table.iloc[0]
    fewest, most = int(table["repeats"].min()), int(table["repeats"].max())
    repeats = f"{fewest}" if fewest == most else f"{fewest} to {most}"
    machines = table["machine"].unique()
    where = machines[0] if len(machines) == 1 else f"{len(machines)} machines"
    lines = [f"Every row: {first['n_prompts']} {unit} on {where} "
             f"({', '.join(table['dtype'].unique())}), the median of {repeats} timed repeats after a warm-up, with "
             "the 95% interval of their mean; latency counts from the job's start (every "
             "request is submitted then), so the wait for earlier batches is in it. "
             "`% of bound`: tokens/s over the roofline's decode bound at that batch size on "
             "this machine (its read bandwidth and matrix throughput, measured; "
             f"{bound_summary(table)}). Accuracy: "
             + ("greedy over the whole split, which every row's answers equal on the timed "
                "problems (`matches_sequential` in the TSV)." if "accuracy_problems" in table
                else "on the timed problems.")]
    for _, group in table.groupby(SAME_SETUP):
        label = f"{group['model'].iloc[0]} on {group['machine'].iloc[0]}"
        best = group[group["best"] == "best"]
        tied = group[group["best"] == "tie"]
        if not best.empty:
            row = best.iloc[0]
            lines.append(f"- Best for {label}: `{row['strategy']}` at batch size "
                         f"{row['batch_size']}, its interval clear of every other row's.")
        elif not tied.empty:
            names = ", ".join(f"`{r['strategy']}` at {r['batch_size']}" for _, r in tied.iterrows())
            lines.append(f"- No single best for {label}: these tie (their intervals overlap the "
                         f"fastest one's): {names}.")
    mismatched = table[~table["matches_sequential"].isin(["yes", "no baseline"])]
    if not mismatched.empty:
        lines.append(f"- {len(mismatched)} row(s) gave answers that part from the one-at-a-time "
                     "run's: see `matches_sequential`.")
    return lines + skip_note


def plot_curve(table: pd.DataFrame, png: str, title: str, panels: int = 4) -> None:
    """Tokens/s (interval bars) and latency against batch size; with 4 panels also memory and
    latency against throughput (each point labelled with its batch size)."""
    fig, axes = subplots(1, panels, figsize=(5 * panels, 4))
    speed, latency = axes[0], axes[1]
    table = table[table["tokens_per_s"].notna()]
    if table.empty:
        speed.text(0.5, 0.5, "no point was timed", ha="center", transform=speed.transAxes)
        fig.suptitle(title)
        save_figure(fig, png)
        return
    several = table["model"].nunique() > 1 or table["machine"].nunique() > 1
    for index, ((model, machine, strategy), group) in enumerate(
            table.groupby(["model", "machine", "strategy"])):
        group = group.sort_values("batch_size")
        label = strategy + (f" ({model}, {machine})" if several else "")
        color = f"C{index % 10}"
        speed.errorbar(group["batch_size"], group["tokens_per_s"],
                       yerr=[group["tokens_per_s"] - group["tokens_per_s_lo"],
                             group["tokens_per_s_hi"] - group["tokens_per_s"]],
                       fmt="o-", capsize=3, color=color, label=label)
        latency.plot(group["batch_size"], group["completion_p50_s"], "o-", color=color,
                     label=f"{label} p50")
        latency.plot(group["batch_size"], group["completion_p99_s"], "s--", color=color,
                     label=f"{label} p99")
        latency.plot(group["batch_size"], group["service_p50_s"], "v:", color=color,
                     label=f"{label} p50 from admission")
        if panels == 4:
            axes[2].plot(group["batch_size"], group["peak_mem_mb"], "o-", color=color,
                         label=f"{label} peak")
            axes[2].plot(group["batch_size"], group["kv_cache_mb"], "^:", color=color,
                         label=f"{label} KV cache")
            axes[3].plot(group["tokens_per_s"], group["completion_p99_s"], "o-", color=color,
                         label=label)
            for _, row in group.iterrows():
                axes[3].annotate(str(row["batch_size"]), (row["tokens_per_s"],
                                                          row["completion_p99_s"]), fontsize=7)
    for (model, machine), group in table.groupby(["model", "machine"]):
        bound = group.groupby("batch_size")["bound_tokens_per_s"].first()
        speed.plot(bound.index, bound.values, "k--", alpha=0.6,
                   label="roofline bound" + (f" ({model}, {machine})" if several else ""))
    speed.set_yscale("log")
    speed.set_ylabel("generated tokens / s (median, 95% interval; log)")
    latency.set_ylabel("latency (s): from submission, or from admission")
    for ax in (speed, latency, *axes[2:3]):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size")
    if panels == 4:
        axes[2].set_ylabel("memory (MB)")
        axes[2].set_ylim(bottom=0)
        axes[3].set_xlabel("generated tokens / s")
        axes[3].set_ylabel("p99 completion latency (s)")
        axes[3].set_title("latency against throughput (labels: batch size)", fontsize=9)
    latency.set_ylim(bottom=0)
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.suptitle(title)
    save_figure(fig, png)


SHAPE = ["decode_share", "pad_fraction", "finished_row_share", "answer_min", "answer_median",
         "answer_p90", "answer_max", "answer_cv", "prompt_min", "prompt_median", "prompt_max",
         "prompt_cv"]


def workload_table(metrics_paths: list[str], records_paths: list[str]) -> pd.DataFrame:
    """Per strategy and batch size, the shape that decides which strategy pays: how much of
    generation is decoding, the prompts' padding, and the plain batched loop's row-steps on
    rows already finished; with the prompt and answer lengths (in picks) beside them."""
    table = points(metrics_paths, records_paths)
    return table[KEYS + SHAPE + ["tokens_per_s"]].sort_values(KEYS, ignore_index=True)


def workload_view(table: pd.DataFrame) -> pd.DataFrame:
    """Per strategy and batch size what changes with them; the lengths go to the notes."""
    columns = ["strategy", "batch_size", "decode_share", "pad_fraction", "finished_row_share",
               "tokens_per_s"]
    if table["model"].nunique() > 1 or table["threads"].nunique() > 1:
        columns = ["model", "threads", *columns]
    return table[columns]


def workload_lines(table: pd.DataFrame) -> list[str]:
    lines = []
    for (model, dataset), group in table.groupby(["model", "dataset"]):
        row = group.iloc[0]
        lines.append(
            f"- {model} on {dataset}: answers of {row['answer_min']:.0f} to "
            f"{row['answer_max']:.0f} picks (median {row['answer_median']:.0f}, p90 "
            f"{row['answer_p90']:.0f}, coefficient of variation {row['answer_cv']:.2f}); prompts "
            f"of {row['prompt_min']:.0f} to {row['prompt_max']:.0f} tokens. Decoding is "
            f"{group[group['batch_size'] == 1]['decode_share'].median():.0%} of generation at "
            "batch size 1.")
    lines.append("- `finished_row_share`: of the plain `batched` loop's row-steps, those spent "
                 "on rows that had already ended (their answers' padding); `batched_stop` and "
                 "`continuous` spend none. `pad_fraction`: the prompts' left padding.")
    return lines


def plot_workload(metrics_paths: list[str], records_paths: list[str], png: str) -> None:
    """A histogram of answer lengths (picks, the end token's included) per model, and the
    plain batched loop's share of finished-row steps against batch size."""
    fig, (lengths, waste) = subplots(1, 2, figsize=(11, 4))
    shown = set()
    for metrics_path, records_path in zip(metrics_paths, records_paths):
        point = read_json(metrics_path)
        if point["model"] in shown:
            continue
        shown.add(point["model"])
        first = point["runs"][0]["strategy"]
        steps = [r["steps"] for r in read_jsonl(records_path) if r["strategy"] == first]
        lengths.hist(steps, bins=20, alpha=0.6, label=point["model"])
    lengths.set_xlabel("answer length (picks)")
    lengths.set_ylabel("answers")
    table = points(metrics_paths, records_paths)
    for model, group in table[table["strategy"] == "batched"].groupby("model"):
        group = group.sort_values("batch_size")
        waste.plot(group["batch_size"], group["finished_row_share"], "o-", label=model)
    waste.set_xscale("log", base=2)
    waste.set_ylim(0, 1)
    waste.set_xlabel("batch size")
    waste.set_ylabel("`batched`: share of row-steps on finished rows")
    for ax in (lengths, waste):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("The timed workload: answer lengths, and what they cost the plain batched loop")
    save_figure(fig, png)
