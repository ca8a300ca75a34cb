"""The batching curve's table on fixed inputs: the workload's shape, speedups and `best` only
between comparable rows, ties reported as ties."""

import json

import pytest

from batched_reasoning.engine.workload import finished_row_share, length_stats
from batched_reasoning.workflow import curve

MACHINE = {"cpu": "Test CPU", "cores": 2, "torch": "x", "device": "cpu",
           "device_name": "Test CPU", "cuda": None, "gpu_memory_gb": None, "driver": None}


def test_length_statistics_of_known_answers():
    stats = length_stats([10, 20, 30, 40, 100])
    assert stats["min"] == 10 and stats["median"] == 30 and stats["max"] == 100
    assert stats["p90"] == pytest.approx(76.0)  # linear between 40 and 100
    assert stats["cv"] == pytest.approx(1000 ** 0.5 / 40)  # population sd over mean


def test_the_plain_loop_wastes_the_steps_of_rows_already_finished():
    # lengths 1 and 10 in one batch of two: 9 of 20 row-steps on the finished row
    assert finished_row_share([1, 10], [[0, 1]]) == pytest.approx(9 / 20)
    # two batches, each of equal lengths: no waste
    assert finished_row_share([3, 3, 7, 7], [[0, 1], [2, 3]]) == 0.0


def summary(median, half=1.0, n=3):
    return {"median": median, "low": median - half, "high": median + half, "n": n}


def write_point(folder, threads, batch_size, runs, tokens, cpu="Test CPU"):
    """A curve point's metrics and records: `runs` maps strategy -> tokens/s (+-1)."""
    folder.mkdir(parents=True, exist_ok=True)
    metrics = {"seed": 0, "model": "m", "dataset": "d", "device": "cpu", "dtype": "float32",
               "threads": threads, "machine": MACHINE | {"threads": threads, "cpu": cpu},
               "n_prompts": 2, "num_samples": 1, "temperature": 0.0, "runs": []}
    records = []
    for strategy, speed in runs.items():
        numbers = {name: summary(1.0) for name in curve.TIMED}
        numbers["tokens_per_s"] = summary(speed)
        metrics["runs"].append({
            "strategy": strategy, "batch_size": 1 if strategy == "sequential" else batch_size,
            "repeats": 3, "summaries": numbers, "samples": [{"wall_s": w} for w in WALLS],
            "peak_memory_mb": 100.0,
            "memory_measure": "vmhwm", "kv_cache_mb": 1.0, "predicted_peak_memory_mb": 110.0,
            "prompt_length": length_stats([5, 6]), "answer_length": length_stats([1, 10]),
            "pad_fraction": 0.0, "finished_row_share": 0.0, "truncated": 0,
            "bound_tokens_per_s": 1000.0, "bound_by": "bandwidth"})
        records += [{"strategy": strategy, "index": i, "key": [i, 0], "generated_ids": t,
                     "generated_text": f"so \\boxed{{{t[0]}}}", "margins": [5.0] * 9,
                     "steps": len(t) + 1} for i, t in enumerate(tokens.get(strategy, [[1], [2]]))]
    (folder / "metrics.json").write_text(json.dumps(metrics))
    (folder / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (folder / "problems.jsonl").write_text("".join(
        json.dumps({"problem": f"p{i}", "answer": a}) + "\n" for i, a in enumerate(ANSWERS)))
    return str(folder / "metrics.json"), str(folder / "records.jsonl")


# Each point's problems: the default answers [[1], [2]] get the first right, the second wrong.
ANSWERS = ["1", "5"]
WALLS = [2.0, 4.0, 4.0]  # the seconds each repeat of a run took


def table_of(tmp_path, points):
    paths = [write_point(tmp_path / f"p{i}", *point) for i, point in enumerate(points)]
    problems = [str(tmp_path / f"p{i}" / "problems.jsonl") for i in range(len(points))]
    return curve.curve_table([m for m, _ in paths], [r for _, r in paths], problems)


def test_accuracy_and_goodput_are_graded_from_the_answers_and_each_repeats_time(tmp_path):
    table = table_of(tmp_path, [(1, 1, {"sequential": 100.0}, {}),
                                (1, 4, {"batched": 300.0}, {"batched": [[1], [5]]})])
    graded = {row.strategy: row for row in table.itertuples()}
    assert graded["sequential"].subset_accuracy == 0.5 and graded["batched"].subset_accuracy == 1.0
    # one right answer in 2, 4 and 4 seconds: 0.5, 0.25, 0.25 correct/s, median 0.25
    assert graded["sequential"].correct_per_s == 0.25
    assert graded["batched"].correct_per_s == 0.5
    low, high = graded["sequential"].correct_per_s_lo, graded["sequential"].correct_per_s_hi
    assert low < 1 / 3 < high  # the interval is of the mean


def test_rows_of_different_thread_counts_are_never_compared(tmp_path):
    table = table_of(tmp_path, [
        (1, 1, {"sequential": 100.0}, {}),
        (1, 4, {"batched": 300.0}, {}),
        (2, 1, {"sequential": 200.0}, {}),
        (2, 4, {"batched": 250.0}, {}),
    ])
    speedup = {(row.threads, row.strategy): row.speedup for row in table.itertuples()}
    assert speedup[(1, "batched")] == pytest.approx(3.0)
    assert speedup[(2, "batched")] == pytest.approx(1.25)  # not 250 / 100
    best = table[table["best"] == "best"]
    assert sorted(zip(best.threads, best.strategy)) == [(1, "batched"), (2, "batched")]


def test_a_tie_is_reported_as_a_tie(tmp_path):
    table = table_of(tmp_path, [(1, 1, {"sequential": 100.0}, {}),
                                (1, 4, {"batched": 300.0, "continuous": 299.5}, {})])
    assert sorted(table.loc[table["best"] == "tie", "strategy"]) == ["batched", "continuous"]
    assert "best" not in set(table["best"])
    assert any("No single best" in line for line in curve.curve_lines(table, "problems"))


def test_a_one_row_setup_names_no_best(tmp_path):
    table = table_of(tmp_path, [(1, 4, {"batched": 300.0}, {})])
    assert set(table["best"]) == {""} and table["speedup"].isna().all()
    assert table["matches_sequential"].tolist() == ["no baseline"]


def test_answers_are_held_against_the_one_at_a_time_run(tmp_path):
    table = table_of(tmp_path, [(1, 1, {"sequential": 100.0}, {}),
                                (1, 4, {"batched": 300.0, "continuous": 290.0},
                                 {"continuous": [[1], [3]]})])
    verdicts = dict(zip(table.strategy, table.matches_sequential))
    assert verdicts == {"sequential": "yes", "batched": "yes",
                        "continuous": "0 near-tie, 1 MISMATCH"}


def test_compact_view_keeps_the_columns_to_compare(tmp_path):
    table = table_of(tmp_path, [(1, 1, {"sequential": 100.0}, {}),
                                (1, 4, {"batched": 300.0}, {})])
    shown = curve.compact(table)
    assert list(shown.columns) == [
        "strategy", "batch size", "tokens/s [95%]", "p50 latency s", "p99 latency s",
        "p50 TTFT s", "peak MB", "accuracy", "correct/s", "% of bound", "× sequential", "best"]
    assert shown["tokens/s [95%]"].tolist() == ["300 [299, 301]", "100 [99, 101]"]


def test_a_curve_whose_every_point_was_skipped_still_makes_its_table(tmp_path):
    skipped = [{"seed": 0, "model": "m", "dataset": "d", "strategy": "batched", "batch_size": 4,
                "device": "cpu", "dtype": "float32", "threads": 1, "predicted_mem_mb": 900,
                "note": "skipped: predicted 900 MB > budget 100 MB"}]
    table = curve.curve_table([], [], [], skipped=skipped)
    assert table["note"].tolist() == [skipped[0]["note"]] and table["tokens_per_s"].isna().all()
    assert list(curve.compact(table).columns) == ["strategy", "batch_size", "note"]
    assert curve.curve_lines(table, "problems")[-1].startswith("- Rows marked *skipped*")
    curve.plot_curve(table, str(tmp_path / "curve.png"), "empty")
    assert (tmp_path / "curve.png").stat().st_size > 0


def test_a_row_timed_on_a_shared_node_says_so():
    """A scheduler's record tells an owned node (or no scheduler) from one other jobs shared."""
    from batched_reasoning.workflow.names import machine_label

    record = MACHINE | {"threads": 2}
    alone = machine_label(record | {"allocation": {"scheduler": "slurm", "exclusive": True}})
    assert alone == machine_label(record) == machine_label(record | {"allocation": None})
    assert alone == "Test CPU, 2 threads"
    shared = machine_label(record | {"allocation": {"scheduler": "slurm", "exclusive": False}})
    assert shared == "Test CPU, 2 threads, node shared"
    unknown = machine_label(record | {"allocation": {"scheduler": "slurm", "exclusive": None}})
    assert unknown == alone  # scontrol could not say: nothing claimed
