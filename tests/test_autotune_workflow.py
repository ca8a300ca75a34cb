"""`batch_sizes: auto` in a real Snakemake run of the tiny config: the probe is a checkpoint, the
stage then runs at the size it chose, a rerun does not probe again, a changed setting does, a
frozen choice needs no probe, and a budget no size fits stops with the setting to change."""

import copy
import json

import pytest
from test_rerun import changed_files, edit_config, library_env, run, snapshot
from workflow_helpers import TINY_CONFIG, copy_run, copy_workflow, snakemake, with_own_library

pytestmark = pytest.mark.slow

CONFIG = copy.deepcopy(TINY_CONFIG)
CONFIG["evaluate"] |= {"strategies": ["sequential", "batched_stop"], "batch_sizes": ["auto"]}
CONFIG["grpo"] |= {"strategies": ["batched_stop"], "world_sizes": [1]}
CONFIG["distill"] |= {"batch_sizes": [4], "world_sizes": [1]}
PROBE = "results/autotune/seed0/evaluate/toy-distilled-bs4-cpu/arith/cpu.json"


@pytest.fixture(scope="module")
def complete_run(tmp_path_factory):
    workdir = with_own_library(copy_workflow(tmp_path_factory.mktemp("autotune") / "run", CONFIG))
    run(workdir)
    return workdir


@pytest.fixture
def workdir(complete_run, tmp_path):
    return copy_run(complete_run, tmp_path / "run")


def test_the_stage_runs_at_the_size_its_probe_chose(complete_run):
    probe = json.loads((complete_run / PROBE).read_text())
    chosen = probe["batch_size"]
    sizes = [t["batch_size"] for t in probe["trials"]]
    assert sizes[:2] == [1, 2] and chosen in sizes
    # the curves' harness: a warm-up, then 3 to 5 repeats as the interval needs
    assert all(t["status"] == "ok" and 3 <= len(t["tokens_per_second"]) <= 5
               for t in probe["trials"])
    points = {p.name for p in (complete_run / "results/seed0/curve/evaluate/"
                                              "toy-distilled-bs4-cpu/arith").glob("bs*")}
    assert points == {f"bs{chosen}", "bs1"}, points  # sequential's point, and the chosen size
    table = (complete_run / "results/tables/evaluate.md").read_text()
    assert f"auto → {chosen}" in table
    assert f"auto → **{chosen}**" in (complete_run / "results/tables/autotune.md").read_text()
    assert (complete_run / "results/plots/autotune.png").stat().st_size > 0


def test_a_rerun_does_not_probe_again(workdir):
    before = snapshot(workdir)
    assert run(workdir) == {}
    assert changed_files(before, snapshot(workdir)) == set()


def test_a_changed_setting_probes_again_and_a_dry_run_says_so(workdir):
    edit_config(workdir, lambda c: c["evaluate"].update(max_new_tokens=6))
    dry = snakemake(workdir, "-n", env=library_env(workdir)).stdout
    assert "checkpoint autotune:" in dry
    ran = run(workdir)
    assert ran.get("autotune") == 1 and ran.get("time_generation", 0) >= 1, ran


def test_a_frozen_choice_needs_no_probe(workdir):
    chosen = json.loads((workdir / PROBE).read_text())["batch_size"]
    edit_config(workdir, lambda c: c["evaluate"].update(batch_sizes=[chosen]))
    ran = run(workdir)
    assert not {"autotune", "evaluate", "time_generation"} & set(ran), ran


def test_a_budget_no_size_fits_stops_with_the_setting_to_change(workdir):
    (workdir / PROBE).unlink()
    edit_config(workdir, lambda c: c.update(memory_budget_mb={"cpu": 100, "cuda": None,
                                                              "mps": None}))
    proc = snakemake(workdir, env=library_env(workdir), check=False)
    assert proc.returncode != 0
    log = (workdir / "results/logs/autotune/seed0/evaluate/toy-distilled-bs4-cpu/arith/"
                     "cpu.log").read_text()
    assert "no batch size fits the 100 MB memory budget" in log
    assert "raise memory_budget_mb" in log
    assert not (workdir / PROBE).exists()


def test_auto_asked_of_a_finished_table_probes_and_rebuilds_it(workdir):
    """Issue 43: a finished run without `auto`, then `auto`, targeting the table alone. A
    checkpoint whose downstream file exists is not run by Snakemake (9.27), so the table names
    the probe's output as an ordinary input: it probes, times the chosen size, rebuilds."""
    edit_config(workdir, lambda c: c["evaluate"].update(batch_sizes=[3]))
    (workdir / PROBE).unlink()
    run(workdir)
    edit_config(workdir, lambda c: c["evaluate"].update(batch_sizes=["auto"]))
    ran = run(workdir, "results/tables/evaluate.tsv")
    assert ran.get("autotune") == 1 and ran.get("evaluate_table") == 1, ran
    chosen = json.loads((workdir / PROBE).read_text())["batch_size"]
    assert f"auto → {chosen}" in (workdir / "results/tables/evaluate.md").read_text()
