"""End-to-end: the workflow on a tiny config, plus parse-time validation and lint."""

import json
import re
import shutil
import subprocess
import sys

import pandas as pd
import pytest
import yaml
from workflow_helpers import REPO, SNAKEMAKE, TINY_CONFIG, copy_run, copy_workflow, snakemake

from batched_reasoning.model.config import Qwen3Config
from batched_reasoning.engine.memory_model import CPU_WORKFLOW_JOB_MB, predict_peak_mb
from batched_reasoning.world.toy_tokenizer import QWEN3_SPECIAL_TOKENS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def finished_run(tiny_run, tmp_path_factory):
    return copy_run(tiny_run[0], tmp_path_factory.mktemp("workflow") / "run")


def test_evaluation_table_is_the_batching_curve(finished_run):
    table = pd.read_csv(finished_run / "results/tables/evaluate.tsv", sep="\t")
    runs = set(zip(table.strategy, table.batch_size))
    assert runs == {("sequential", 1), ("batched", 1), ("batched", 3), ("batched_stop", 1),
                    ("batched_stop", 3), ("continuous", 1), ("continuous", 3)}
    assert (table.matches_sequential == "yes").all()
    assert set(table.model) == {"toy-distilled-bs4-cpu"} and (table.threads == 1).all()
    assert (table.repeats == 3).all() and (table.tokens_per_s_lo <= table.tokens_per_s).all()
    assert (table.completion_p99_s >= table.completion_p50_s).all()
    assert (table.tokens_per_s > 0).all() and (table.peak_mem_mb > 0).all()
    assert (table.accuracy_problems == TINY_CONFIG["datasets"]["arith"]["n_test"]).all()
    assert set(table.best.dropna()) <= {"best", "tie"} and table.best.notna().any()
    assert (finished_run / "results/plots/evaluate.png").stat().st_size > 10_000
    text = (finished_run / "results/tables/evaluate.md").read_text()
    assert "tokens/s [95%]" in text and ("Best for" in text or "No single best" in text)
    workload = pd.read_csv(finished_run / "results/tables/workload.tsv", sep="\t")
    assert set(zip(workload.strategy, workload.batch_size)) == runs
    assert (workload.answer_min <= workload.answer_max).all()
    curve = pd.read_csv(finished_run / "results/tables/self_consistency_curve.tsv", sep="\t")
    assert set(zip(curve.strategy, curve.batch_size)) == {
        ("sequential", 1), ("batched_stop", 3), ("continuous", 3)}
    assert (curve.matches_sequential == "yes").all()


def test_metrics_record_provenance(finished_run):
    metrics = yaml.safe_load((finished_run / "results/seed0/evaluate/toy-distilled-bs4-cpu/arith/"
                                             "batched_stop/bs3/cpu/metrics.json").read_text())
    assert metrics["seed"] == 0 and metrics["threads"] == 1
    assert metrics["config"]["max_new_tokens"] == 8
    assert len(metrics["code_hash"]) == 16
    assert metrics["packages"]["torch"].startswith("2.")
    assert metrics["device_name"]
    point = json.loads((finished_run / "results/seed0/curve/evaluate/toy-distilled-bs4-cpu/arith/"
                                       "bs3/cpu/t1/metrics.json").read_text())
    assert point["machine"]["threads"] == 1 and point["machine"]["cpu"]
    assert point["machine_limits"]["read_gb_s"] > 0 and point["code_hash"]


# Two ranks compute a step's loss and gradient from the same items as one rank, only summed in
# another order: in float32 (~1e-7 relative per operation, a few hundred operations deep in the
# tiny model) that moves a loss by far less than 1e-4 relative over a handful of steps, while a
# wrong share or scale changes the update itself (tests/test_distributed.py proves the
# arithmetic on gradients in float64).
CURVE_RTOL = 1e-4


@pytest.mark.parametrize("stage, run, columns", [
    ("grpo", "toy/arith/batched_stop/bs4/cpu", ["loss", "reward_avg", "eval_acc"]),
    ("distill", "toy/arith/bs4/cpu", ["train_loss", "val_loss"]),
])
def test_two_ranks_learn_what_one_rank_learns(finished_run, stage, run, columns):
    curves = [pd.read_csv(finished_run / f"results/seed0/{stage}/{run}/ws{n}/log.csv") for n in (1, 2)]
    one, two = curves
    assert len(one) == len(two) > 2 and one.step.tolist() == two.step.tolist()
    if stage == "grpo":  # the same rollouts, step by step
        assert one.rollouts_digest.tolist() == two.rollouts_digest.tolist()
    for column in columns:
        assert one[column].notna().sum() >= 2, column
        pd.testing.assert_series_equal(one[column], two[column], rtol=CURVE_RTOL, atol=0)
    table = pd.read_csv(finished_run / f"results/tables/{stage}.tsv", sep="\t")
    assert sorted(table.world_size.unique().tolist()) == [1, 2]


def test_timed_jobs_never_run_side_by_side(finished_run):
    """Two cores, one-thread jobs: without the default profile's `timing=1` resource, Snakemake
    would run two timed jobs at once and each would report the other's slowdown."""
    spans = sorted(
        (metrics["started_at"], metrics["finished_at"], str(path))
        for stage in ("evaluate", "self_consistency", "grpo", "distill", "curve")
        for path in (finished_run / "results").glob(f"seed*/{stage}/**/metrics.json")
        for metrics in [json.loads(path.read_text())]
    )
    assert len(spans) > 10
    for (_, end, first), (start, _, second) in zip(spans, spans[1:]):
        assert start >= end, f"{second} started before {first} finished"


def test_every_table_says_how_sure_its_accuracies_and_effects_are(finished_run):
    tables = {stage: pd.read_csv(finished_run / f"results/tables/{stage}.tsv", sep="\t")
              for stage in ("evaluate", "self_consistency", "grpo", "distill")}
    for stage, columns in (("evaluate", ["accuracy"]), ("self_consistency", ["vote_accuracy", "vote_gain"]),
                           ("grpo", ["eval_acc_after", "eval_gain"]), ("distill", ["accuracy_gain"])):
        table = tables[stage]
        assert (table.seed == 0).all()
        for column in columns:
            assert (table[f"{column}_lo"] <= table[column]).all(), (stage, column)
            assert (table[column] <= table[f"{column}_hi"]).all(), (stage, column)
    story = pd.read_csv(finished_run / "results/tables/story.tsv", sep="\t", dtype={"seed": str})
    assert list(story.seed) == ["0"]  # one seed: no mean across seeds, no interval of one
    sc = tables["self_consistency"].iloc[0]
    assert story.vote_gain.iloc[0] == pytest.approx(sc.vote_accuracy - sc.first_sample_accuracy, abs=1e-3)
    assert "[" in (finished_run / "results/tables/story.md").read_text()
    assert (finished_run / "results/plots/story.png").stat().st_size > 10_000


def test_appendix_e_table_fills_all_eight_cells(finished_run):
    """Every workload one at a time and batched, each batched row with its speedup and
    interval, every row with its total time and the book's figures."""
    table = pd.read_csv(finished_run / "results/tables/appendix_e.tsv", sep="\t")
    assert list(zip(table["workload"], table["mode"])) == [
        (w, m) for w in ("evaluation", "self_consistency", "grpo", "distillation")
        for m in ("one at a time", "batched")]
    assert table[["work_s", "total_s", "throughput", "peak_mem_mb", "book_h100_min"]].notna().all().all()
    assert (table["total_s"] > table["work_s"]).all()  # the job's start-up is in the total
    batched = table[table["mode"] == "batched"]
    assert (batched["speedup_lo"] <= batched["speedup"]).all()
    assert (batched["speedup"] <= batched["speedup_hi"]).all()
    assert batched["same_outputs"].str.startswith("yes").all(), batched["same_outputs"].tolist()
    assert "book: H100 min" in (finished_run / "results/tables/appendix_e.md").read_text()
    assert (finished_run / "results/plots/appendix_e.png").stat().st_size > 10_000


def test_seeds_are_replicates_that_share_the_data(tmp_path):
    config = yaml.safe_load(yaml.safe_dump(TINY_CONFIG)) | {"seeds": [0, 1]}
    plan = snakemake(copy_workflow(tmp_path, config), "-n").stdout
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", plan, re.M))
    assert jobs["make_arith"] == "1" and jobs["teacher_traces"] == "1"  # the data: once
    assert jobs["pretrain"] == "2" and jobs["story_table"] == "1"
    for seed in (0, 1):
        assert f"results/seed{seed}/pretrain/toy/model" in plan
        assert f"results/seed{seed}/distill/toy/arith/bs4/cpu/ws2/metrics.json" in plan


def test_the_old_seed_key_says_what_replaced_it(tmp_path):
    config = yaml.safe_load(yaml.safe_dump(TINY_CONFIG)) | {"seed": 3}
    out = snakemake(copy_workflow(tmp_path, config), "-n", check=False)
    assert out.returncode != 0 and "seeds: [3]" in out.stdout + out.stderr


def test_second_run_has_nothing_to_do(finished_run):
    out = snakemake(finished_run, "-n")
    assert "Nothing to be done" in out.stdout + out.stderr


def test_report_builds_offline(finished_run):
    snakemake(finished_run, "--report", "results/report.zip")
    assert (finished_run / "results/report.zip").stat().st_size > 10_000


def predicted_toy_mb(batch_size, max_new_tokens):
    """The workflow's parse-time prediction for the tiny config's toy model (512-token prompts)."""
    toy = dict(TINY_CONFIG["toy"])
    toy["vocab_size"] += len(QWEN3_SPECIAL_TOKENS)
    return predict_peak_mb(Qwen3Config(**toy), "float32", batch_size, 512, max_new_tokens, "cpu",
                           CPU_WORKFLOW_JOB_MB, packed=True)["total"]


def test_memory_budget_skips_runs_that_would_not_fit(finished_run, tmp_path):
    workdir = tmp_path / "budget"
    shutil.copytree(finished_run, workdir, symlinks=True)
    new_tokens = TINY_CONFIG["evaluate"]["max_new_tokens"]
    budget = (predicted_toy_mb(1, new_tokens) + predicted_toy_mb(3, new_tokens)) / 2
    config = yaml.safe_load((workdir / "tiny.yaml").read_text())
    config["memory_budget_mb"] = {"cpu": budget}
    (workdir / "tiny.yaml").write_text(yaml.safe_dump(config))
    plan = snakemake(workdir, "-n", "results/tables/evaluate.tsv")
    assert "rule evaluate:" not in plan.stdout  # nothing new runs; the table is redone
    assert "rule time_generation:" not in plan.stdout
    snakemake(workdir, "-p", "results/tables/evaluate.tsv")  # a flag ends --configfile's list
    table = pd.read_csv(workdir / "results/tables/evaluate.tsv", sep="\t")
    skipped = table[table.note.fillna("").str.startswith("skipped")]
    assert set(zip(skipped.strategy, skipped.batch_size)) == {
        ("batched", 3), ("batched_stop", 3), ("continuous", 3)}
    assert skipped.tokens_per_s.isna().all() and (skipped.predicted_mem_mb > budget).all()
    assert f"> budget {budget:g} MB" in skipped.note.iloc[0]
    assert (table.batch_size[table.best == "best"] == 1).all()
    assert "memory_budget_mb" in (workdir / "results/tables/evaluate.md").read_text()


@pytest.mark.parametrize(
    "section, key, value, named",
    [
        ("evaluate", "batch_sizes", [0], "batch_sizes"),
        ("evaluate", "batch_sizes", ["x"], "batch_sizes"),
        ("evaluate", "devices", ["tpu"], "devices"),
        ("evaluate", "models", ["gpt-5"], "evaluate.models"),
        ("evaluate", "datasets", ["gsm8k"], "evaluate.datasets"),
        ("evaluate", "max_new_tokens", 0, "max_new_tokens"),
        ("grpo", "world_sizes", [0], "world_sizes"),
        ("grpo", "world_sizes", [1, 64], "grpo.world_sizes has 64"),
    ],
)
def test_bad_config_fails_at_parse_time(tmp_path, section, key, value, named):
    config = yaml.safe_load(yaml.safe_dump(TINY_CONFIG))
    config.setdefault(section, {})[key] = value
    workdir = copy_workflow(tmp_path, config)
    out = snakemake(workdir, "-n", check=False)
    assert out.returncode != 0
    assert named in out.stdout + out.stderr
    assert not (workdir / "results").exists()


def test_broken_dataset_record_is_named(tmp_path):
    config = yaml.safe_load(yaml.safe_dump(TINY_CONFIG))
    config["datasets"]["mine"] = {"source": "local", "path": "mine.jsonl"}
    config["evaluate"] |= {"models": ["toy"], "datasets": ["mine"]}
    workdir = copy_workflow(tmp_path, config)
    (workdir / "mine.jsonl").write_text(
        '{"problem": "1+1?", "answer": "2"}\n{"problem": "2+2?"}\n')
    out = snakemake(workdir, "--until", "import_local_dataset", check=False)
    assert out.returncode != 0
    log = (workdir / "results/logs/import_local_dataset/mine/test.log").read_text()
    assert "mine.jsonl" in log and "record 1" in log and "answer" in log
    assert not (workdir / "resources/data/mine/test.jsonl").exists()


def test_lint_and_format():
    out = subprocess.run([*SNAKEMAKE, "--lint"], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr  # every rule names its conda env too
    fmt = subprocess.run([sys.executable, "-m", "snakefmt", "--check", "Snakefile", "workflow"],
                         cwd=REPO, capture_output=True, text=True)
    assert fmt.returncode == 0, fmt.stderr
