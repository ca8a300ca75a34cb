"""Appendix E's table on fixed inputs: one row per workload and mode, a speedup only against a
baseline and a tie where its interval includes 1, the batched row chosen by the intervals, the
book's figures as published, and several machines side by side."""

import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import shared_file
from test_curve import MACHINE, write_point

from batched_reasoning.workflow import appendix_e
from batched_reasoning.workflow.appendix_e import (
    BOOK_COLUMNS,
    appendix_table,
    compact,
    notes,
    read_book,
    side_by_side,
)

BOOK = Path(__file__).resolve().parents[1] / "workflow/resources/appendix_e8_book.tsv"
CONFIGURED = {"evaluate": ["batched_stop", 8], "self_consistency": ["continuous", 8],
              "grpo": ["batched_stop", 8], "distill": ["batched", 8]}


def curve_point(folder, batch_size, repeats: dict[str, list[float]]):
    """A curve point whose strategies' repeats measured these tokens/s (wall time 1/x)."""
    metrics_path, records_path = write_point(folder, 1, batch_size,
                                             {s: sum(v) / len(v) for s, v in repeats.items()}, {})
    metrics = json.loads(open(metrics_path).read())
    for run in metrics["runs"]:
        run["samples"] = [{"tokens_per_s": x, "wall_s": 1 / x} for x in repeats[run["strategy"]]]
    metrics["setup_s"] = 2.0
    open(metrics_path, "w").write(json.dumps(metrics))
    return metrics_path, records_path


def training_metrics(path, stage, runs: dict[tuple, list[float]]):
    """A training timing whose settings' repeats took these times for 4 steps."""
    metrics = {"seed": 0, "model": "m", "dataset": "d", "device": "cpu", "stage": stage,
               "unit": "rollouts" if stage == "grpo" else "examples", "timed_steps": 4,
               "setup_s": 3.0, "dtype": "float32", "threads": 1,
               "machine": MACHINE | {"threads": 1}, "runs": []}
    for (strategy, size), times in runs.items():
        agreement = ({"same_steps": 4, "compared_steps": 4} if stage == "grpo"
                     else {"max_loss_difference": 1e-7})
        metrics["runs"].append({
            "strategy": strategy, "batch_size": size, "units_per_step": 8,
            "samples": [{"work_s": t, "steps_per_s": 4 / t, "generation_s": t / 2}
                        for t in times], "peak_memory_mb": 100.0 * size} | agreement)
    path.write_text(json.dumps(metrics))
    return str(path)


def inputs(evaluate=(), self_consistency=(), training=()):
    return {"evaluate": [m for m, _ in evaluate], "evaluate_records": [r for _, r in evaluate],
            "self_consistency": [m for m, _ in self_consistency],
            "self_consistency_records": [r for _, r in self_consistency],
            "training": list(training)}


def row(table, workload, mode):
    found = table[(table["workload"] == workload) & (table["mode"] == mode)]
    assert len(found) == 1
    return found.iloc[0]


def test_the_books_columns_are_the_books_figures():
    ours = read_book(BOOK)
    assert len(ours) == 8
    assert sorted(set(ours["workload"])) == sorted(appendix_e.WORKLOADS)
    published = shared_file("appendix_e8_book.tsv")  # skips where ../shared is absent
    theirs = pd.read_csv(published, sep="\t")
    pd.testing.assert_frame_equal(ours.drop(columns="mode"), theirs)


def test_a_speedup_whose_interval_includes_1_is_a_tie(tmp_path):
    clear = training_metrics(tmp_path / "grpo.json", "grpo", {
        ("sequential", 1): [1.0, 1.02, 0.98], ("batched_stop", 8): [0.50, 0.51, 0.49]})
    tied = training_metrics(tmp_path / "distill.json", "distill", {
        ("sequential", 1): [1.0, 1.1, 0.9], ("batched", 8): [0.95, 1.05, 0.97]})
    table = appendix_table(inputs(training=[clear, tied]), CONFIGURED, BOOK)
    grpo, distill = row(table, "grpo", "batched"), row(table, "distillation", "batched")
    assert grpo["speedup"] == pytest.approx(2.0, rel=0.02)
    assert grpo["speedup_lo"] > 1 and grpo["speedup_verdict"] == "faster"
    assert distill["speedup_lo"] < 1 < distill["speedup_hi"]
    assert distill["speedup_verdict"] == "tie (interval includes 1)"
    # the whole job's ratio adds the start-up both pay: 3 s + 4 steps
    assert grpo["total_speedup"] == pytest.approx((3.0 + 1.0) / (3.0 + 0.5), rel=0.02)
    assert distill["same_outputs"].startswith("yes") and grpo["same_outputs"] == "yes"


def test_a_workload_without_a_baseline_says_so_and_prints_no_speedup(tmp_path):
    lonely = training_metrics(tmp_path / "grpo.json", "grpo",
                              {("batched_stop", 8): [0.5, 0.5, 0.5]})
    table = appendix_table(inputs(training=[lonely]), CONFIGURED, BOOK)
    batched = row(table, "grpo", "batched")
    assert pd.isna(batched["speedup"])
    assert batched["speedup_verdict"] == "no one-at-a-time baseline"
    assert "grpo: no one-at-a-time run, so no speedup." in "\n".join(notes(table))
    shown = compact(table)
    assert shown.loc[(table["workload"] == "grpo") & (table["mode"] == "batched"),
                     "speedup [95%]"].item() == ""


def test_every_workload_and_mode_has_a_row_with_the_books_figures(tmp_path):
    grpo = training_metrics(tmp_path / "grpo.json", "grpo", {
        ("sequential", 1): [1.0, 1.0, 1.0], ("batched_stop", 8): [0.5, 0.5, 0.5]})
    table = appendix_table(inputs(training=[grpo]), CONFIGURED, BOOK)
    assert list(zip(table["workload"], table["mode"])) == [
        (w, m) for w in appendix_e.WORKLOADS for m in appendix_e.MODES]
    missing = table[table["workload"] != "grpo"]
    assert set(missing["note"]) == {"not run by this configuration"}
    assert table[list(BOOK_COLUMNS.values())].notna().all().all()
    book = read_book(BOOK)
    h100 = book.set_index(["workload", "mode"])["h100_min"]
    assert row(table, "grpo", "batched")["book_h100_speedup"] == pytest.approx(
        h100[("grpo", "one at a time")] / h100[("grpo", "batched")])


def test_the_batched_row_is_the_clear_winner_else_the_configured_one(tmp_path):
    clear = [curve_point(tmp_path / "e1", 1, {"sequential": [100.0, 101.0, 99.0]}),
             curve_point(tmp_path / "e4", 4, {"batched": [400.0, 401.0, 399.0]}),
             curve_point(tmp_path / "e8", 8, {"batched_stop": [300.0, 301.0, 299.0]})]
    table = appendix_table(inputs(evaluate=clear), CONFIGURED, BOOK)
    chosen = row(table, "evaluation", "batched")
    assert (chosen["strategy"], chosen["batch_size"]) == ("batched", 4)
    assert chosen["chosen_by"] == "fastest, interval clear of the others"
    assert chosen["speedup"] == pytest.approx(4.0)
    assert chosen["same_outputs"] == "yes"

    tied = [curve_point(tmp_path / "t1", 1, {"sequential": [100.0, 101.0, 99.0]}),
            curve_point(tmp_path / "t4", 4, {"batched": [400.0, 440.0, 360.0]}),
            curve_point(tmp_path / "t8", 8, {"batched_stop": [390.0, 430.0, 350.0]})]
    table = appendix_table(inputs(evaluate=tied), CONFIGURED, BOOK)
    chosen = row(table, "evaluation", "batched")
    assert (chosen["strategy"], chosen["batch_size"]) == ("batched_stop", 8)
    assert chosen["chosen_by"].startswith("configured (2 settings tie")
    # the same work timed: evaluation's total adds the point's start-up to the repeats' time
    assert chosen["total_s"] == pytest.approx(2.0 + 1 / 390.0)


def test_self_consistency_counts_samples_per_second(tmp_path):
    points = [curve_point(tmp_path / "s1", 1, {"sequential": [10.0, 10.0, 10.0]}),
              curve_point(tmp_path / "s8", 8, {"continuous": [50.0, 50.0, 50.0]})]
    table = appendix_table(inputs(self_consistency=points), CONFIGURED, BOOK)
    batched = row(table, "self_consistency", "batched")
    # 2 samples per repeat of 1/50 s
    assert batched["throughput"] == pytest.approx(100.0)
    assert batched["unit"] == "samples/s" and batched["work"] == "2 samples"


def test_merged_tables_put_machines_side_by_side(tmp_path):
    tables = []
    for cpu in ("Laptop CPU", "Server CPU"):
        path = training_metrics(tmp_path / f"{cpu}.json", "grpo", {
            ("sequential", 1): [1.0, 1.0, 1.0], ("batched_stop", 8): [0.5, 0.5, 0.5]})
        metrics = json.loads(open(path).read())
        metrics["machine"]["cpu"] = cpu
        open(path, "w").write(json.dumps(metrics))
        tables.append(appendix_table(inputs(training=[path]), CONFIGURED, BOOK))
    merged = side_by_side(tables)
    assert len(merged) == 8
    for cpu in ("Laptop CPU", "Server CPU"):
        column = f"speedup ({cpu}, 1 thread, float32)"
        assert merged.loc[(merged["workload"] == "grpo") & (merged["mode"] == "batched"),
                          column].item().startswith("2.00")
    assert {"book_h100_min", "book_dgx_spark_min"} <= set(merged.columns)


def test_noisy_repeats_give_an_open_interval_not_a_negative_one(tmp_path):
    """Three repeats far apart: the t-interval of the baseline's rate reaches below 0. A rate is
    never negative, so its interval stops at 0, the speedup's has no upper end, and the figure
    draws it (a negative error bar would stop the table job)."""
    noisy = training_metrics(tmp_path / "grpo.json", "grpo", {
        ("sequential", 1): [1.0, 1.5, 9.0], ("batched_stop", 8): [0.5, 0.52, 2.5]})
    table = appendix_table(inputs(training=[noisy]), CONFIGURED, BOOK)
    base, batched = row(table, "grpo", "one at a time"), row(table, "grpo", "batched")
    assert base["throughput_lo"] == 0.0 and base["work_s_lo"] >= 0.0
    assert batched["speedup_hi"] == float("inf")
    assert batched["speedup_verdict"] == "tie (interval includes 1)"
    appendix_e.plot_speedups(table, str(tmp_path / "plot.png"), "noisy")
    assert (tmp_path / "plot.png").stat().st_size > 10_000


def test_two_repeats_say_they_give_no_interval(tmp_path):
    """With 2 repeats a 95% interval is 12.7 standard errors each side: the table shows the
    medians and says there is no interval, rather than `[0.03, inf]`."""
    two = training_metrics(tmp_path / "grpo.json", "grpo", {
        ("sequential", 1): [1.0, 3.0], ("batched_stop", 8): [0.5, 0.52]})
    table = appendix_table(inputs(training=[two]), CONFIGURED, BOOK)
    batched = row(table, "grpo", "batched")
    assert batched["speedup"] > 1 and pd.isna(batched["speedup_lo"])
    assert batched["speedup_verdict"] == "2 repeats: no interval"
    shown = appendix_e.compact(table)
    cell = shown.loc[(shown["workload"] == "grpo") & (shown[""] == "batched"), "speedup [95%]"]
    assert cell.iloc[0].endswith("(no interval)") and "inf" not in cell.iloc[0]
    assert any("2 repeats: no interval" in line for line in appendix_e.notes(table))
    appendix_e.plot_speedups(table, str(tmp_path / "plot.png"), "two repeats")
    assert (tmp_path / "plot.png").stat().st_size > 10_000
