"""Appendix E's table (the book's E.8), built from runs: for each of the four workloads
(evaluation, self-consistency, GRPO, distillation) the one-at-a-time run against the batched
one, with the book's published figures beside ours.

Our rows come from timings made like a benchmark's (warm-up excluded, repeats, 95% intervals):
evaluation and self-consistency from their batching curves, GRPO and distillation from the
timing of their first steps (`stages.training_timing`). Each pair of rows times the same work.
The batched row is the stage's fastest batched setting where its interval is clear of every
other; otherwise the stage's configured one (`chosen_by` says which).
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pandas as pd

from ..core.io import read_json
from ..core.plots import save_figure, subplots
from ..core.timing import INTERVAL_REPEATS, Summary, summarize, winner
from .curve import SAME_SETUP, matches_sequential, points
from .names import machine_label
from ..engine.agreement import verdict
from .tables import write_table

WORKLOADS = ("evaluation", "self_consistency", "grpo", "distillation")
UNITS = {"evaluation": "tokens/s", "self_consistency": "samples/s", "grpo": "steps/s",
         "distillation": "examples/s"}
MODES = ("one at a time", "batched")
BOOK_COLUMNS = {"batch_size": "book_batch_size", "ram_gb": "book_ram_gb",
                "h100_min": "book_h100_min", "dgx_spark_min": "book_dgx_spark_min",
                "settings": "book_settings"}
# Every row's columns, whether or not a run gave them.
COLUMNS = ["workload", "mode", "seed", "model", "dataset", "device", "dtype", "threads", "machine",
           "strategy", "batch_size", "chosen_by", "work", "repeats", "peak_mem_mb", "setup_s",
           "work_s", "work_s_lo", "work_s_hi", "throughput", "throughput_lo", "throughput_hi",
           "speedup", "speedup_lo", "speedup_hi", "speedup_verdict", "total_speedup",
           "total_speedup_lo", "total_speedup_hi", "same_outputs"]
# A step's losses batched and one at a time sum the same terms in another order. In float32
# each of the ~10^3 products and sums behind a loss rounds at 6e-8 relative, so the two may part
# by up to ~10^3 x 6e-8 = 6e-5; a larger difference is not rounding.
LOSS_TOLERANCE = {"float32": 1e-4, "float64": 1e-12, "bfloat16": 0.1, "float16": 0.05}


def read_book(path: str | Path) -> pd.DataFrame:
    """The book's eight rows (the project's copy of Appendix E.8), one per workload and mode."""
    book = pd.read_csv(path, sep="\t", comment="#")
    book["mode"] = ["one at a time" if size == 1 else "batched" for size in book["batch_size"]]
    return book


def summary_of(values: list[float]) -> Summary:
    """The repeats' median and 95% interval; no interval (NaN ends) under `INTERVAL_REPEATS`."""
    if len(values) < INTERVAL_REPEATS:
        return Summary(statistics.median(values), math.nan, math.nan, len(values))
    return summarize(values)


def timed(run_samples: list[dict], units: float | None, key: str = "wall_s",
          rate: str | None = None) -> dict:
    """Work time and throughput, each as median and interval over the repeats: throughput is
    `units` per repeat over its time, or the repeats' own `rate`."""
    work = summary_of([s[key] for s in run_samples])
    speed = summary_of([s[rate] if rate else units / s[key] for s in run_samples])
    # a time or a rate is never negative, though a wide t-interval of few repeats can reach below 0
    return {"work_s": work.median, "work_s_lo": nonnegative(work.low), "work_s_hi": work.high,
            "throughput": speed.median, "throughput_lo": nonnegative(speed.low),
            "throughput_hi": speed.high, "repeats": work.n}


def nonnegative(low: float) -> float:
    return low if math.isnan(low) else max(low, 0.0)


def choose(candidates: dict, configured: list | None) -> tuple[object, str]:
    """The batched setting to show: the fastest where its interval is clear of every other,
    else the configured one, else (none of the timed ones is configured) the fastest median."""
    summaries = {key: Summary(row["throughput"], row["throughput_lo"], row["throughput_hi"],
                              row["repeats"]) for key, row in candidates.items()}
    if len(summaries) == 1:
        key = next(iter(summaries))
        return key, "configured" if list(key) == list(configured or []) else "the only one timed"
    if any(math.isnan(s.low) for s in summaries.values()):
        if configured is not None and tuple(configured) in summaries:
            return tuple(configured), "configured (too few repeats to rank)"
        return max(summaries, key=lambda k: summaries[k].median), "fastest median (too few repeats to rank)"
    best, tied = winner(summaries)
    if best is not None:
        return best, "fastest, interval clear of the others"
    if configured is not None and tuple(configured) in summaries:
        return tuple(configured), f"configured ({len(tied)} settings tie for fastest)"
    return tied[0], f"fastest median ({len(tied)} settings tie)"


def curve_rows(workload: str, metrics_paths: list[str], records_paths: list[str],
               configured: list | None) -> list[dict]:
    """Evaluation's or self-consistency's pair of rows per setup, from its batching curve."""
    if not metrics_paths:
        return []
    table = points(metrics_paths, records_paths)
    samples, setup_s = {}, {}
    for metrics in map(read_json, metrics_paths):
        setup = (int(metrics["seed"]), metrics["model"], metrics["dataset"], metrics["device"],
                 metrics["threads"])
        setup_s[setup] = metrics.get("setup_s")
        for run in metrics["runs"]:
            samples[setup + (run["strategy"], run["batch_size"])] = run["samples"]
    rows = []
    for _, group in table.groupby(SAME_SETUP):

        def row_of(point: pd.Series) -> dict:
            setup = (point["seed"], point["model"], point["dataset"], point["device"],
                     point["threads"])
            runs = samples[setup + (point["strategy"], point["batch_size"])]
            numbers = (timed(runs, point["n_prompts"]) if workload == "self_consistency"
                       else timed(runs, None, rate="tokens_per_s"))
            unit = "problems" if workload == "evaluation" else "samples"
            return {k: point[k] for k in SAME_SETUP} | {
                "workload": workload, "strategy": point["strategy"],
                "batch_size": int(point["batch_size"]), "peak_mem_mb": point["peak_mem_mb"],
                "work": f"{point['n_prompts']} {unit}", "setup_s": setup_s[setup]} | numbers

        def agree(key: tuple) -> str:
            chosen = group[(group["strategy"] == key[0]) & (group["batch_size"] == key[1])]
            return matches_sequential(chosen.iloc[0], base)

        sequential = group[group["strategy"] == "sequential"]
        base = None if sequential.empty else sequential.iloc[0]
        batched = {(p["strategy"], int(p["batch_size"])): row_of(p)
                   for _, p in group[group["strategy"] != "sequential"].iterrows()}
        rows += pair(None if base is None else row_of(base), batched, configured, agree)
    return rows


def pair(base: dict | None, batched: dict, configured: list | None, agree) -> list[dict]:
    """The one-at-a-time row and the chosen batched row, the speedup on the batched one."""
    rows = []
    if base is not None:
        rows.append(base | {"mode": "one at a time", "chosen_by": "", "same_outputs": ""})
    if batched:
        key, reason = choose(batched, configured)
        row = batched[key] | {"mode": "batched", "chosen_by": reason,
                              "same_outputs": agree(key) if base is not None else "no baseline"}
        rows.append(row | speedup(row, base))
    return rows


def speedup(row: dict, base: dict | None) -> dict:
    """Batched throughput over one at a time's, its interval from the two intervals'
    ends (conservative), and whether it is clear of 1."""
    if base is None:
        return {"speedup": None, "speedup_lo": None, "speedup_hi": None,
                "speedup_verdict": "no one-at-a-time baseline", "total_speedup": None,
                "total_speedup_lo": None, "total_speedup_hi": None}
    value = row["throughput"] / base["throughput"]
    if math.isnan(row["throughput_lo"]) or math.isnan(base["throughput_lo"]):
        repeats = min(row["repeats"], base["repeats"])
        return {"speedup": value, "speedup_lo": math.nan, "speedup_hi": math.nan,
                "speedup_verdict": f"{repeats} repeats: no interval", **total_speedup(row, base)}
    low = row["throughput_lo"] / base["throughput_hi"]
    # a baseline interval reaching 0 bounds the speedup from below only
    high = row["throughput_hi"] / base["throughput_lo"] if base["throughput_lo"] > 0 else math.inf
    verdict = "faster" if low > 1 else "slower" if high < 1 else "tie (interval includes 1)"
    return {"speedup": value, "speedup_lo": low, "speedup_hi": high, "speedup_verdict": verdict,
            **total_speedup(row, base)}


def total_speedup(row: dict, base: dict) -> dict:
    """The speedup of the whole job doing this work: start-up plus work, one at a time's over
    batched's (the book's total-time ratio); start-up is paid alike, so it shrinks the gain."""
    if row.get("setup_s") is None or base.get("setup_s") is None:
        return {"total_speedup": None, "total_speedup_lo": None, "total_speedup_hi": None}
    one, many = base["setup_s"], row["setup_s"]
    return {"total_speedup": (one + base["work_s"]) / (many + row["work_s"]),
            "total_speedup_lo": (one + base["work_s_lo"]) / (many + row["work_s_hi"]),
            "total_speedup_hi": (one + base["work_s_hi"]) / (many + row["work_s_lo"])}


def training_rows(metrics_path: str, configured: list | None) -> list[dict]:
    """GRPO's or distillation's pair of rows from the timing of its first steps."""
    metrics = read_json(metrics_path)
    workload = "grpo" if metrics["stage"] == "grpo" else "distillation"
    steps = metrics["timed_steps"]
    setup = {"seed": int(metrics["seed"]), "model": metrics["model"],
             "dataset": metrics["dataset"], "device": metrics["device"],
             "dtype": metrics["dtype"], "threads": metrics["threads"],
             "machine": machine_label(metrics["machine"]), "workload": workload,
             "setup_s": metrics["setup_s"]}

    def row_of(run: dict) -> dict:
        units = steps * (run["units_per_step"] if workload == "distillation" else 1)
        return setup | {"strategy": run["strategy"], "batch_size": run["batch_size"],
                        "peak_mem_mb": run["peak_memory_mb"],
                        "work": f"{steps} steps x {run['units_per_step']} {metrics['unit']}"
                        } | timed(run["samples"], units, "work_s")

    runs = metrics["runs"]
    base = next((r for r in runs if r["batch_size"] == 1 and r["strategy"] == "sequential"), None)
    batched = {(r["strategy"], r["batch_size"]) if workload == "grpo" else ("batched",
               r["batch_size"]): r for r in runs if r is not base}
    return pair(None if base is None else row_of(base),
                {key: row_of(run) for key, run in batched.items()}, configured,
                lambda key: training_agreement(batched[key], metrics["dtype"]))


def training_agreement(run: dict, dtype: str) -> str:
    """`yes`, or how the batched steps' outputs part from the one-at-a-time steps'."""
    if "same_steps" in run:
        same, total = run["same_steps"], run["compared_steps"]
        if same == total:
            return "yes"
        first = run["first_parted"]
        return f"{same} of {total} steps the same; step {first['step']}: {verdict(first['verdicts'])}"
    worst = run["max_loss_difference"]
    if worst is None:
        return "losses not finite"
    if worst <= LOSS_TOLERANCE[dtype]:
        return f"yes (losses within {worst:.0e}, float rounding)"
    return f"no: a step's loss differs by {worst:.1e} (relative)"


def appendix_table(inputs: dict, configured: dict, book_path: str | Path) -> pd.DataFrame:
    """Every workload's one-at-a-time and batched rows, with the book's figures beside them
    and a row saying so where a workload has no run."""
    rows = curve_rows("evaluation", inputs["evaluate"], inputs["evaluate_records"],
                      configured.get("evaluate"))
    rows += curve_rows("self_consistency", inputs["self_consistency"],
                       inputs["self_consistency_records"], configured.get("self_consistency"))
    for path in inputs["training"]:
        stage = read_json(path)["stage"]
        rows += training_rows(path, configured.get(stage))
    table = pd.DataFrame(rows)
    table = table.reindex(columns=list(dict.fromkeys([*COLUMNS, *table.columns])))
    table["total_s"] = table["setup_s"] + table["work_s"]
    table["unit"] = table["workload"].map(UNITS)
    book = read_book(book_path).rename(columns=BOOK_COLUMNS)
    book = book[["workload", "mode", *BOOK_COLUMNS.values()]]
    missing = [{"workload": w, "mode": m, "note": "not run by this configuration"}
               for w in WORKLOADS for m in MODES
               if not ((table["workload"] == w) & (table["mode"] == m)).any()]
    table = pd.concat([table, pd.DataFrame(missing, columns=["workload", "mode", "note"])],
                      ignore_index=True)
    table = table.merge(book, on=["workload", "mode"], how="left")
    table["book_h100_speedup"] = book_speedups(table, "book_h100_min")
    table["book_dgx_spark_speedup"] = book_speedups(table, "book_dgx_spark_min")
    order = {w: i for i, w in enumerate(WORKLOADS)}
    table = table.sort_values(
        by=["workload", "mode"], key=lambda c: c.map(order) if c.name == "workload"
        else c.map({m: i for i, m in enumerate(MODES)}), kind="stable", ignore_index=True)
    return table


def book_speedups(table: pd.DataFrame, column: str) -> list:
    """The book's speedup (one-at-a-time minutes over batched minutes), on its batched rows."""
    minutes = {(r["workload"], r["mode"]): r[column] for _, r in table.iterrows()}
    return [minutes.get((r["workload"], "one at a time"), math.nan) / r[column]
            if r["mode"] == "batched" else None for _, r in table.iterrows()]


def number_format(value: float) -> str:
    """Whole numbers from 100 up, three significant digits below."""
    return ".0f" if abs(value) >= 100 else ".3g"


def interval_text(value, low, high, digits: str) -> str:
    if value is None or pd.isna(value):
        return ""
    if pd.isna(low):
        return f"{value:{digits}} (no interval)"
    return f"{value:{digits}} [{low:{digits}}, {high:{digits}}]"


def compact(table: pd.DataFrame) -> pd.DataFrame:
    """The columns a person compares, each number with its interval in one cell."""
    shown = pd.DataFrame({
        "workload": table["workload"], "": table["mode"], "batch size": table["batch_size"],
        "chosen by": table["chosen_by"], "work timed": table["work"],
        "peak MB": table["peak_mem_mb"].map(lambda v: "" if pd.isna(v) else f"{v:.0f}"),
        "work s [95%]": [interval_text(*v, ".2f") for v in
                         zip(table["work_s"], table["work_s_lo"], table["work_s_hi"])],
        "total s": table["total_s"].map(lambda v: "" if pd.isna(v) else f"{v:.1f}"),
        "throughput [95%]": [
            "" if pd.isna(v) else f"{interval_text(v, lo, hi, number_format(v))} {unit}"
            for v, lo, hi, unit
            in zip(table["throughput"], table["throughput_lo"], table["throughput_hi"],
                   table["unit"])],
        "speedup [95%]": [interval_text(*v, ".2f") for v in
                          zip(table["speedup"], table["speedup_lo"], table["speedup_hi"])],
        "total speedup": [interval_text(*v, ".2f") for v in
                          zip(table["total_speedup"], table["total_speedup_lo"],
                              table["total_speedup_hi"])],
        "same outputs": table["same_outputs"],
        "book: batch": table["book_batch_size"], "book: RAM GB": table["book_ram_gb"],
        "book: H100 min": table["book_h100_min"],
        "book: DGX Spark min": table["book_dgx_spark_min"],
    })
    return shown.astype(object).fillna("")


def notes(table: pd.DataFrame) -> list[str]:
    """What the rows share and what each column means."""
    ours = table[table["work_s"].notna()]
    machines = ", ".join(f"{m} ({d})" for m, d in
                         ours[["machine", "dtype"]].drop_duplicates().itertuples(index=False))
    lines = [
        f"Ours: {machines or 'no run'}; the median of each setting's timed repeats after a "
        "warm-up, with the 95% interval of their mean. `work s` is the work alone (generation, "
        "or training steps); `total s` adds the job's start-up measured in the same job "
        "(interpreter, imports, loading the model), as the book's total time includes it. A "
        "pair of rows times the same work (`work timed`); GRPO and distillation time their first "
        "steps from the same starting weights, not a whole training run.",
        "`speedup`: batched throughput over one at a time's, its interval from the two "
        "intervals' ends; a speedup whose interval includes 1 is a tie, not a win. `total "
        "speedup`: the same for the total times, start-up included, which both pay alike.",
        "Book: Appendix E.8 of *Build a Reasoning Model (From Scratch)* as published, Qwen3-0.6B "
        "on an H100 and a DGX Spark, minutes for the whole script; its settings are in the TSV "
        "(`book_settings`). Its work is not ours: compare speedups, not times.",
    ]
    for _, row in table[table["speedup_verdict"].notna()].iterrows():
        if row["speedup_verdict"] == "no one-at-a-time baseline":
            lines.append(f"- {row['workload']}: no one-at-a-time run, so no speedup.")
        elif row["speedup_verdict"].endswith("no interval"):
            lines.append(f"- {row['workload']}: {row['speedup_verdict']} (an interval needs "
                         f"`timing.minimum_repeats` >= {INTERVAL_REPEATS}; with 2, a 95% "
                         "interval is 12.7 standard errors each side), so no verdict either.")
    for _, row in table[table["note"].notna()].iterrows():
        lines.append(f"- {row['workload']} ({row['mode']}): {row['note']}.")
    return lines


def plot_speedups(table: pd.DataFrame, png: str, title: str) -> None:
    """The speedup of batched over one at a time per workload, one bar per machine (with its
    interval) and the book's two machines beside them."""
    batched = table[table["mode"] == "batched"]
    ours = batched[batched["speedup"].notna()]
    machines = list(dict.fromkeys(f"{m} ({d})" for m, d in zip(ours["machine"], ours["dtype"])))
    series = machines + ["book: H100", "book: DGX Spark"]
    fig, ax = subplots(figsize=(10, 4.5))
    width = 0.8 / len(series)
    for index, name in enumerate(series):
        xs, heights, errors = [], [], [[], []]
        for position, workload in enumerate(WORKLOADS):
            rows = batched[batched["workload"] == workload]
            if name.startswith("book: "):
                column = "book_h100_speedup" if name.endswith("H100") else "book_dgx_spark_speedup"
                values = rows[column].dropna()
                if values.empty:
                    continue
                xs.append(position + index * width)
                heights.append(float(values.iloc[0]))
                errors[0].append(0.0)
                errors[1].append(0.0)
                continue
            mine = rows[[f"{m} ({d})" == name for m, d in zip(rows["machine"], rows["dtype"])]]
            mine = mine[mine["speedup"].notna()]
            if mine.empty:
                continue
            row = mine.iloc[0]
            xs.append(position + index * width)
            heights.append(row["speedup"])
            no_interval = math.isnan(row["speedup_lo"])  # too few repeats: a bare bar
            errors[0].append(0.0 if no_interval else row["speedup"] - row["speedup_lo"])
            # an unbounded interval (its baseline's reaches 0) is drawn to 10x its bar
            errors[1].append(0.0 if no_interval else
                             min(row["speedup_hi"], 10 * row["speedup"]) - row["speedup"])
        book = name.startswith("book: ")
        ax.bar(xs, heights, width, yerr=None if book else errors, capsize=3, label=name,
               hatch="//" if book else None, alpha=0.5 if book else 0.9)
    ax.axhline(1.0, color="black", linewidth=1, linestyle="--")
    ax.set_ylim(bottom=0.5)  # a workload where batching lost shows below the line
    ax.set_xticks([p + 0.4 - width / 2 for p in range(len(WORKLOADS))])
    ax.set_xticklabels(["evaluation", "self-consistency", "GRPO", "distillation"])
    ax.set_yscale("log")
    ax.set_ylabel("speedup of batched over one at a time (log; 1 = no gain)")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7)
    fig.suptitle(title)
    save_figure(fig, png)


def make_appendix_table(inputs: dict, outputs: dict, configured: dict, book: str) -> pd.DataFrame:
    """`appendix_e.{tsv,md,png}` from the runs' files and the book's rows."""
    table = appendix_table(inputs, configured, book)
    plot_speedups(table, outputs["plot"], "What batching buys each workload (Appendix E.8)")
    write_table(table, outputs["tsv"], outputs["md"],
                "Appendix E's table: each workload one at a time and batched", notes(table),
                shown=compact(table))
    return table


def side_by_side(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """Appendix E's tables of several runs as one: a row per workload and mode, per machine
    (processor, threads, dtype) its batch size, times and speedup, then the book's columns."""
    long = pd.concat(tables, ignore_index=True)
    long = long[long["work_s"].notna()]
    merged = pd.DataFrame([{"workload": w, "mode": m} for w in WORKLOADS for m in MODES])
    for (machine, dtype), rows in long.groupby(["machine", "dtype"], sort=False):
        label = f"{machine}, {dtype}"
        rows = rows.drop_duplicates(["workload", "mode"])
        view = pd.DataFrame({
            "workload": rows["workload"], "mode": rows["mode"],
            f"batch size ({label})": rows["batch_size"],
            f"work s ({label})": rows["work_s"], f"total s ({label})": rows["total_s"],
            f"speedup ({label})": [interval_text(*v, ".2f") for v in
                                   zip(rows["speedup"], rows["speedup_lo"], rows["speedup_hi"])]})
        merged = merged.merge(view, on=["workload", "mode"], how="left")
    book = pd.concat(tables, ignore_index=True).drop_duplicates(["workload", "mode"])
    return merged.merge(book[["workload", "mode", "book_batch_size", "book_ram_gb",
                              "book_h100_min", "book_dgx_spark_min"]],
                        on=["workload", "mode"], how="left")


def merge_tables(paths: list[Path], out: Path) -> Path:
    """`out/appendix_e.{tsv,md,png}` from the `appendix_e.tsv` of several runs."""
    tables = [pd.read_csv(path, sep="\t") for path in paths]
    merged = side_by_side(tables)
    out.mkdir(parents=True, exist_ok=True)
    plot_speedups(pd.concat(tables, ignore_index=True), str(out / "appendix_e.png"),
                  f"What batching buys each workload, {len(paths)} runs (Appendix E.8)")
    shown, legend = merged_view(merged)
    write_table(merged, str(out / "appendix_e.tsv"), str(out / "appendix_e.md"),
                f"Appendix E's table, merged from {len(paths)} runs",
                ["Per machine (processor, threads, dtype): the batch size, the work's time "
                 "with the job's start-up, and batched's speedup over one at a time with its "
                 "95% interval (the TSV also has the work's time alone). Book: Appendix E.8 as "
                 "published (minutes of the whole script, Qwen3-0.6B).", *legend,
                 "Runs: " + ", ".join(map(str, paths)) + "."], shown=shown)
    return out / "appendix_e.tsv"


def merged_view(merged: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The merged table to read: machines numbered in the headers, named in a legend."""
    labels = [c.removeprefix("speedup (").removesuffix(")") for c in merged.columns
              if c.startswith("speedup (")]
    shown = merged[["workload", "mode"]].copy()
    legend = []
    for number, label in enumerate(labels, start=1):
        legend.append(f"- machine {number}: {label}")
        shown[f"{number}: batch"] = merged[f"batch size ({label})"]
        shown[f"{number}: total s"] = merged[f"total s ({label})"].map(
            lambda v: "" if pd.isna(v) else f"{v:.2f}")
        shown[f"{number}: speedup [95%]"] = merged[f"speedup ({label})"]
    for column, name in (("book_batch_size", "book: batch"), ("book_h100_min", "book: H100 min"),
                         ("book_dgx_spark_min", "book: DGX Spark min")):
        shown[name] = merged[column]
    return shown.astype(object).fillna(""), legend
