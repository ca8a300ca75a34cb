"""The story table: each stage's effect per seed from the stage tables, and across seeds."""

import json
import subprocess
import sys

import pandas as pd
import pytest
import yaml
from workflow_helpers import REPO, TINY_CONFIG

from batched_reasoning.workflow.stats import bootstrap_mean_interval
from batched_reasoning.workflow.story import make_story, parse_seeds, story_table
from batched_reasoning.workflow.tables import NO_EFFECT_MARK, markdown

SETUP = {"model": "toy", "dataset": "arith", "device": "cpu"}


def effect(name, value, half=0.04):
    return {name: value, f"{name}_lo": value - half, f"{name}_hi": value + half}


def stage_tables():
    """Two seeds' stage tables as the table rules write them: several strategies, batch sizes
    and ranks per seed, whose effects differ so that the chosen run can be told apart."""
    sc, grpo, distill = [], [], []
    for seed, gain in ((0, 0.10), (1, 0.14)):
        for strategy, batch_size, shift in (("continuous", 16, 0.5), ("sequential", 1, 0.0)):
            sc.append(SETUP | {"seed": seed, "strategy": strategy, "batch_size": batch_size}
                      | effect("vote_gain", gain + shift))
        for strategy, world_size, shift in (("batched_stop", 1, 0.5), ("sequential", 2, 0.7),
                                            ("sequential", 1, 0.0)):
            grpo.append(SETUP | {"seed": seed, "strategy": strategy, "batch_size": 8,
                                 "world_size": world_size, "eval_acc_before": 0.5,
                                 "reward_first_quarter": 0.4, "reward_final": 0.6}
                        | effect("eval_gain", gain + 0.05 + shift))
        for batch_size, world_size, shift in ((8, 1, 0.0), (1, 2, 0.5), (8, 2, 0.5)):
            distill.append(SETUP | {"seed": seed, "batch_size": batch_size,
                                    "world_size": world_size, "base_accuracy": 0.5}
                           | effect("accuracy_gain", gain - 0.12 + shift))
    return pd.DataFrame(sc), pd.DataFrame(grpo), pd.DataFrame(distill)


def test_each_seed_takes_the_sequential_one_rank_run_of_each_stage():
    table = story_table(*stage_tables())
    runs = table[table["seed"].isin(["0", "1"])].set_index("seed")
    assert runs.loc["0", "vote_gain"] == pytest.approx(0.10)
    assert runs.loc["1", "eval_gain"] == pytest.approx(0.19)
    assert runs.loc["0", "accuracy_gain"] == pytest.approx(-0.02)
    assert runs.loc["1", "accuracy_gain_lo"] == pytest.approx(-0.02)
    assert runs.loc["1", "reward_final"] == 0.6


def test_the_mean_row_bootstraps_the_seeds_effects():
    table = story_table(*stage_tables())
    mean = table[table["seed"] == "mean of 2"].iloc[0]
    for name, values in (("vote_gain", [0.10, 0.14]), ("eval_gain", [0.15, 0.19])):
        expected = bootstrap_mean_interval(values)
        assert (mean[name], mean[f"{name}_lo"], mean[f"{name}_hi"]) == pytest.approx(expected)


def test_markdown_marks_the_effects_whose_interval_includes_zero():
    text = markdown(story_table(*stage_tables()))
    lines = {line.split("|")[1].strip(): line for line in text.splitlines()[2:]}
    assert "-0.020 [-0.060, +0.020] " + NO_EFFECT_MARK in lines["0"]
    assert "+0.100 [+0.060, +0.140] |" in lines["0"]  # above 0: unmarked
    assert NO_EFFECT_MARK not in lines["1"].split("|")[-4]


def test_story_files_are_written_from_the_stage_tables(tmp_path):
    inputs = {}
    for stage, table in zip(("self_consistency", "grpo", "distill"), stage_tables()):
        inputs[stage] = tmp_path / f"{stage}.tsv"
        table.to_csv(inputs[stage], sep="\t", index=False)
    outputs = {"tsv": tmp_path / "story.tsv", "md": tmp_path / "story.md",
               "plot": tmp_path / "story.png"}
    make_story(inputs, {k: str(v) for k, v in outputs.items()})
    written = pd.read_csv(outputs["tsv"], sep="\t", dtype={"seed": str})
    assert list(written["seed"]) == ["0", "1", "mean of 2"]
    text = outputs["md"].read_text()
    assert "positive in 2 of 2 runs" in text and NO_EFFECT_MARK in text
    assert outputs["plot"].stat().st_size > 10_000


def test_seed_ranges():
    assert parse_seeds("0-4") == [0, 1, 2, 3, 4]
    assert parse_seeds("0,3,7") == [0, 3, 7]
    assert parse_seeds("0-2,9") == [0, 1, 2, 9]


@pytest.mark.slow
def test_the_story_check_runs_every_seed_on_every_cpu_class(tmp_path):
    """The README's command, on the tiny config: one workflow per CPU class, each class's jobs
    on its kernels, and one table of every run."""
    config = TINY_CONFIG | {"seeds": [0]}
    for stage in ("grpo", "distill"):  # one rank: the story's runs, not data parallelism
        config[stage] = config[stage] | {"world_sizes": [1]}
    tiny = tmp_path / "tiny.yaml"
    tiny.write_text(yaml.safe_dump(config))
    out = tmp_path / "check"
    subprocess.run([sys.executable, "-m", "batched_reasoning.workflow.story", "--seeds", "0-1",
                    "--cpu-classes", "native,avx2", "--cores", "2", "--repo", str(REPO),
                    "--out", str(out), "--configfile", str(tiny)],
                   check=True, capture_output=True, text=True, timeout=1800)
    table = pd.read_csv(out / "story.tsv", sep="\t", dtype={"seed": str})
    assert list(zip(table.cpu.fillna(""), table.seed)) == [
        ("native", "0"), ("native", "1"), ("avx2", "0"), ("avx2", "1"), ("", "mean of 4")]
    for cpu in ("native", "avx2"):
        metrics = json.loads(next((out / cpu / "results").glob(
            "seed1/grpo/**/metrics.json")).read_text())
        assert metrics["seed"] == 1 and metrics["cpu_class"] == cpu
        if cpu == "avx2":
            assert metrics["cpu_capability"] == "AVX2"
    assert "mean of 4" in (out / "story.md").read_text()
