"""Aggregation: every run's metrics joined into comparison tables (TSV + Markdown) and plots."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from .io import atomic_path, read_json, read_jsonl  # noqa: E402

RUN_KEYS = ["model", "dataset", "strategy", "batch_size", "device", "dtype"]


def load_runs(metrics_paths: list[str]) -> pd.DataFrame:
    return pd.DataFrame([read_json(p) for p in metrics_paths])


def mark_best(table: pd.DataFrame, group: list[str], by: str) -> pd.Series:
    """True on the row with the highest `by` within each group."""
    best = table.groupby(group)[by].transform("max")
    return table[by].eq(best)


def evaluate_table(metrics_paths: list[str], records_paths: list[str]) -> pd.DataFrame:
    runs = load_runs(metrics_paths)
    outputs = [[r["generated_ids"] for r in read_jsonl(p)] for p in records_paths]
    runs["outputs"] = outputs
    same_setup = ["model", "dataset", "device", "dtype"]
    rows = []
    for _, run in runs.iterrows():
        baseline = runs[(runs[same_setup] == run[same_setup]).all(axis=1)
                        & (runs["strategy"] == "sequential")]
        row = {k: run[k] for k in RUN_KEYS} | {
            "accuracy": run["accuracy"],
            **{f"acc_L{level}": acc for level, acc in run["accuracy_by_level"].items()},
            "time_s": run["wall_seconds"],
            "tokens_per_s": run["tokens_per_second"],
            "peak_mem_mb": run["peak_memory_mb"],
            "pad_fraction": run["pad_fraction"],
            "latency_p50_s": run["latency_p50_seconds"],
            "latency_p95_s": run["latency_p95_seconds"],
        }
        if baseline.empty:
            row |= {"speedup_vs_sequential": None, "matches_sequential": "no baseline"}
        else:
            base = baseline.iloc[0]
            row["speedup_vs_sequential"] = run["tokens_per_second"] / base["tokens_per_second"]
            if run["dtype"] == "float32":
                row["matches_sequential"] = "yes" if run["outputs"] == base["outputs"] else "MISMATCH"
            else:
                same = [a == b for a, b in zip(run["outputs"], base["outputs"])]
                row["matches_sequential"] = f"{sum(same) / len(same):.0%} agree"
        rows.append(row)
    table = pd.DataFrame(rows).sort_values(RUN_KEYS, ignore_index=True)
    table["best"] = mark_best(table, ["model", "dataset", "device"], "tokens_per_s").map(
        {True: "best", False: ""})
    return table


def write_table(table: pd.DataFrame, tsv: str, md: str, title: str) -> None:
    with atomic_path(tsv) as tmp:
        table.to_csv(tmp, sep="\t", index=False, float_format="%.4g")
    best = table[table.get("best", "") == "best"]
    lines = [f"# {title}", "", table.to_markdown(index=False, floatfmt=".4g"), ""]
    for _, row in best.iterrows():
        lines.append(
            f"- Best on **{row['device']}** for {row['model']} / {row['dataset']}: "
            f"`{row['strategy']}` at batch size **{row['batch_size']}** ({row['dtype']}), "
            f"{row['tokens_per_s']:.1f} tokens/s."
        )
    with atomic_path(md) as tmp:
        tmp.write_text("\n".join(lines) + "\n")


def plot_throughput(table: pd.DataFrame, png: str, title: str) -> None:
    """Tokens/s and peak memory against batch size, one line per device and strategy."""
    fig, (speed, memory) = plt.subplots(1, 2, figsize=(11, 4))
    for (model, dataset, device, strategy), group in table.groupby(
        ["model", "dataset", "device", "strategy"]
    ):
        group = group.sort_values("batch_size")
        label = f"{device} {strategy}" + (f" ({model}/{dataset})" if table["model"].nunique() > 1
                                          or table["dataset"].nunique() > 1 else "")
        style = "o" if len(group) == 1 else "o-"
        speed.plot(group["batch_size"], group["tokens_per_s"], style, label=label)
        memory.plot(group["batch_size"], group["peak_mem_mb"], style, label=label)
    for ax, ylabel in ((speed, "generated tokens / s"), (memory, "peak memory (MB)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    speed.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    with atomic_path(png) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
