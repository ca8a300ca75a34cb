"""Rerun exactly what changed: config values, library code and the sweep decide which jobs rerun.

A complete tiny run is made once; each test copies it (metadata and mtimes included), changes
one thing, and reads the jobs a dry run would execute. The library is imported from a copy
inside the work directory (PYTHONPATH), so a test can edit a module without touching the repo.
"""

import os
import re
import shutil

import pytest
import yaml
from workflow_helpers import REPO, copy_workflow, snakemake

pytestmark = pytest.mark.slow


def with_library(workdir):
    shutil.copytree(REPO / "src", workdir / "src")
    env = os.environ | {"PYTHONPATH": str(workdir / "src")}
    return env


@pytest.fixture(scope="module")
def complete_run(tmp_path_factory):
    workdir = copy_workflow(tmp_path_factory.mktemp("rerun") / "run")
    snakemake(workdir, env=with_library(workdir))
    return workdir


@pytest.fixture
def workdir(complete_run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(complete_run, copy, symlinks=True)
    return copy


def planned_jobs(workdir) -> dict[str, int]:
    """Rule -> number of jobs a dry run would execute."""
    env = os.environ | {"PYTHONPATH": str(workdir / "src")}
    out = snakemake(workdir, "-n", env=env).stdout
    if "Nothing to be done" in out:
        return {}
    table = out.split("Job stats:")[1].split("\n\n")[0]
    jobs = {}
    for line in table.splitlines():
        match = re.match(r"^(\w+)\s+(\d+)$", line.strip())
        if match and match[1] != "total":
            jobs[match[1]] = int(match[2])
    return jobs


def edit_config(workdir, change):
    config = yaml.safe_load((workdir / "tiny.yaml").read_text())
    change(config)
    (workdir / "tiny.yaml").write_text(yaml.safe_dump(config))


def test_second_run_has_nothing_to_do(workdir):
    assert planned_jobs(workdir) == {}


def test_changed_grpo_lr_reruns_only_grpo(workdir):
    edit_config(workdir, lambda c: c["grpo"].update(lr=3e-4))
    assert planned_jobs(workdir) == {"grpo": 6, "grpo_table": 1, "all": 1}  # 3 strategies x 2 world sizes


def test_added_batch_size_schedules_only_its_runs(workdir):
    edit_config(workdir, lambda c: c["evaluate"].update(batch_sizes=[1, 3, 5]))
    # batched, batched_stop and continuous at the new size; sequential runs at size 1 only
    assert planned_jobs(workdir) == {"tokenize": 1, "evaluate": 3, "evaluate_table": 1, "all": 1}


def test_sampler_edit_reruns_only_sampling_stages(workdir):
    module = workdir / "src/batched_reasoning/sampling.py"
    module.write_text(module.read_text() + "\n# a changed sampler\n")
    assert planned_jobs(workdir) == {"self_consistency": 7, "self_consistency_table": 1,
                                     "grpo": 6, "grpo_table": 1, "all": 1}


def test_edit_of_unused_module_reruns_nothing(workdir):
    module = workdir / "src/batched_reasoning/bench.py"
    module.write_text(module.read_text() + "\n# nothing imports this\n")
    assert planned_jobs(workdir) == {}


def test_model_code_edit_reruns_everything_that_runs_the_model(workdir):
    module = workdir / "src/batched_reasoning/model.py"
    module.write_text(module.read_text() + "\n# a changed model\n")
    jobs = planned_jobs(workdir)
    assert {"build_toy_model", "pretrain", "evaluate", "self_consistency"} <= set(jobs)
    assert "make_arith" not in jobs
