"""Rerun exactly what changed, for real: after a complete tiny run, change one thing, run
`snakemake` again and check which jobs ran and that every other output is untouched.

The library is imported from a copy inside the work directory (PYTHONPATH), so a test can edit
a module without touching the repository. CI runs this suite as an unprivileged user: root
ignores write bits, so only an ordinary user sees a write-protected output stop a rerun.
"""

import hashlib
import os
import re
import shutil
import signal
import stat
import subprocess
import time

import pytest
import yaml
from workflow_helpers import (REPO, SNAKEMAKE, copy_run, jobs_that_ran, library_env,
                              snakemake)

from batched_reasoning.core.io import read_json
from batched_reasoning.workflow.plan import Plan
from batched_reasoning.core.provenance import imported_modules, module_closure

pytestmark = pytest.mark.slow

OUTPUT_DIRS = ("results", "resources")


def run(workdir, *args, check=True):
    """A real `snakemake` run; returns {rule: jobs that ran}."""
    return jobs_that_ran(snakemake(workdir, *args, env=library_env(workdir), check=check))


def merged(base: dict, override: dict) -> dict:
    """`--configfile` semantics: nested mappings merge, everything else replaces."""
    result = dict(base)
    for key, value in override.items():
        is_map = isinstance(value, dict) and isinstance(base.get(key), dict)
        result[key] = merged(base[key], value) if is_map else value
    return result


def plan_of(workdir) -> Plan:
    """The runs the work directory's config asks for, counted by the library's own plan."""
    defaults = yaml.safe_load((workdir / "config.yaml").read_text())
    return Plan(merged(defaults, yaml.safe_load((workdir / "tiny.yaml").read_text())))


# The jobs of the complete run, per rule: what a change may rerun is a part of it.
COMPLETE_RUN: dict[str, int] = {}


@pytest.fixture(scope="module")
def complete_run(tiny_run, tmp_path_factory):
    workdir, ran = tiny_run
    COMPLETE_RUN.update(ran)
    return copy_run(workdir, tmp_path_factory.mktemp("rerun") / "run")


def complete_run_of(rules) -> dict[str, int]:
    """The complete run's jobs of `rules` (a predicate on the rule name)."""
    return {rule: count for rule, count in COMPLETE_RUN.items() if rules(rule)}


@pytest.fixture
def workdir(complete_run, tmp_path):
    return copy_run(complete_run, tmp_path / "run")


def snapshot(workdir) -> dict[str, tuple[int, str]]:
    """(mtime, content hash) of every output file."""
    files = {}
    for top in OUTPUT_DIRS:
        for path in sorted((workdir / top).rglob("*")):
            if path.is_file():
                files[str(path.relative_to(workdir))] = (
                    path.stat().st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest())
    return files


def changed_files(before, after) -> set[str]:
    return {path for path in before.keys() | after.keys() if before.get(path) != after.get(path)}


def edit_config(workdir, change):
    config = yaml.safe_load((workdir / "tiny.yaml").read_text())
    change(config)
    (workdir / "tiny.yaml").write_text(yaml.safe_dump(config))


def edit_module(workdir, name, old, new):
    module = workdir / "src/batched_reasoning" / f"{name.replace('.', '/')}.py"
    text = module.read_text()
    assert old in text
    module.write_text(text.replace(old, new, 1))


def test_outputs_are_never_write_protected(complete_run):
    """A protected output stops every rerun of its job for an ordinary user."""
    for top in OUTPUT_DIRS:
        for path in (complete_run / top).rglob("*"):
            assert path.stat().st_mode & 0o200, f"{path} is not writable by its owner"


def test_outputs_have_the_users_permissions(complete_run):
    """Outputs are made with the user's umask like any file of theirs: a cluster group that
    shares a results directory can read every checkpoint and table (tempfile's owner-only mode
    and safetensors' own file creation would hide them)."""
    umask = os.umask(0)
    os.umask(umask)
    for top in OUTPUT_DIRS:
        for path in (complete_run / top).rglob("*"):
            mode = stat.S_IMODE(path.stat().st_mode)
            wanted = (0o777 if path.is_dir() else 0o666) & ~umask
            assert mode == wanted, f"{path} has mode {oct(mode)}, umask {oct(umask)}"


def test_second_run_does_nothing(workdir):
    before = snapshot(workdir)
    assert run(workdir) == {}
    assert changed_files(before, snapshot(workdir)) == set()


def test_changed_grpo_lr_reruns_only_grpo(workdir):
    before = snapshot(workdir)
    edit_config(workdir, lambda c: c["grpo"].update(lr=3e-4))
    grpo_runs = len(plan_of(workdir).grpo_runs())
    assert grpo_runs >= 4  # strategies x 2 world sizes
    # GRPO's timing for Appendix E's table runs with the stage's settings: it reruns too
    assert run(workdir) == {"grpo": grpo_runs, "grpo_table": 1, "story_table": 1,
                            "time_training": 1, "appendix_e_table": 1}
    changed = changed_files(before, snapshot(workdir))
    assert changed and all(any(part in path for part in ("grpo", "story", "appendix_e"))
                           for path in changed), sorted(changed)
    assert run(workdir) == {}


def test_changed_pretrain_steps_retrains_from_scratch_and_reruns_downstream(workdir):
    edit_config(workdir, lambda c: c["pretrain"].update(steps=30))
    ran = run(workdir)
    assert ran["pretrain"] == 1
    assert {"evaluate", "self_consistency", "grpo", "distill"} <= set(ran)
    assert "make_arith" not in ran and "build_toy_model" not in ran
    metrics = read_json(workdir / "results/seed0/pretrain/toy/metrics.json")
    assert metrics["steps"] == 30 and metrics["resumed_from_step"] == 0
    assert not (workdir / "results/seed0/pretrain/toy/checkpoints").exists()  # a finished run leaves none


def test_comment_and_docstring_edits_rerun_nothing(workdir):
    edit_module(workdir, "engine.sampling", '"""Temperature and top-p sampling',
                '"""Temperature and nucleus (top-p) sampling')
    edit_module(workdir, "engine.sampling", "\n\n\ndef row_seed", "\n\n\n# a comment\ndef row_seed")
    assert run(workdir) == {}


def test_sampler_code_edit_reruns_only_sampling_stages(workdir):
    before = snapshot(workdir)
    edit_module(workdir, "engine.sampling", "uniform.to(cumulative.dtype) * cumulative[:, -1]",
                "cumulative[:, -1] * uniform.to(cumulative.dtype)")
    plan = plan_of(workdir)
    # the curves' one script times sampled and greedy points alike: both rerun
    points = len(plan.curve_points("evaluate")) + len(plan.curve_points("self_consistency"))
    sampled = len(plan.generation_runs("self_consistency"))
    assert run(workdir) == {"self_consistency": sampled, "vote": sampled,
                            "self_consistency_table": 1, "time_generation": points,
                            "evaluate_table": 1, "workload_table": 1,
                            "self_consistency_curve_table": 1,
                            "grpo": len(plan.grpo_runs()), "grpo_table": 1, "story_table": 1,
                            "time_training": len(plan.timed_trainings()),
                            "appendix_e_table": 1}
    changed = changed_files(before, snapshot(workdir))
    stages = ("self_consistency", "/vote/", "grpo", "story", "/curve/", "tables/evaluate",
              "plots/evaluate", "workload", "timed_training", "appendix_e")
    assert all(any(stage in path for stage in stages) for path in changed), sorted(changed)


def test_model_code_edit_rebuilds_the_model_and_tokenizes_nothing(workdir):
    """The toy is rebuilt and everything that runs a model reruns; the tokenizer is its own
    job's output, and tokenization reads nothing else."""
    edit_module(workdir, "model.qwen3", "return weight * x.to(dtype)",
                "return x.to(dtype) * weight")
    untouched = {"make_arith", "build_toy_tokenizer", "tokenize", "teacher_traces"}
    assert run(workdir, "-n") == complete_run_of(lambda rule: rule not in untouched)


def test_grader_edit_regrades_and_generates_nothing(workdir):
    """Evaluation and self-consistency generate nothing again: their `grade` and `vote` jobs
    and the tables (the curve tables grade the timed answers) rerun, and GRPO, whose reward is
    the grader, with its timing."""
    edit_module(workdir, "data.grading", "return int(gold_text) == int(pred_text)",
                "return int(pred_text) == int(gold_text)")
    reruns = {"grade", "vote", "grpo", "time_training"}
    assert run(workdir, "-n") == complete_run_of(
        lambda rule: rule in reruns or rule.endswith("_table"))


def test_table_edit_rebuilds_tables_and_plots_only(workdir):
    edit_module(workdir, "workflow.tables", 'index=False, float_format="%.4g"',
                'float_format="%.4g", index=False')
    assert run(workdir, "-n") == complete_run_of(lambda rule: rule.endswith("_table"))


# Issue 43: every config change is planned whatever the target, or refused before any job runs.
# Each row: a change (merged into the tiny config as `--configfile` does), a target (None: the
# default), and the exact jobs a dry run plans, or the error that names the key.
EVALUATE, GRPO, SC = ("results/tables/evaluate.tsv", "results/tables/grpo.tsv",
                      "results/tables/self_consistency.tsv")
def local_model(path: str) -> dict:
    return {"models": {"mine": {"source": "local", "path": path, "prompt_style": "base"}},
            "evaluate": {"models": ["mine"]}}


TOY_MODEL = "results/seed0/pretrain/toy/model"  # a real model directory, the tiny run's toy
LOCAL_DATA = {"datasets": {"mydata": {"source": "local", "path": "/nonexistent.json"}},
              "evaluate": {"datasets": ["mydata"]}}
AUTO = {"evaluate": {"batch_sizes": ["auto"], "strategies": ["sequential", "batched_stop"]}}
NO_TRAIN_SPLIT = {"grpo": {"models": ["qwen3-0.6b-base"], "datasets": ["math500"]}}
PLANS = [
    # a new batch size: its curve point, and the tables that show it
    ({"evaluate": {"batch_sizes": [1, 3, 2]}}, None,
     {"time_generation": 1, "evaluate_table": 1, "workload_table": 1, "appendix_e_table": 1}),
    ({"evaluate": {"batch_sizes": [1, 3, 2]}}, EVALUATE,
     {"time_generation": 1, "evaluate_table": 1}),
    ({"self_consistency": {"batch_sizes": [3, 2]}}, None,
     {"self_consistency": 1, "vote": 1, "self_consistency_table": 1, "story_table": 1}),
    ({"self_consistency": {"batch_sizes": [3, 2]}}, SC,
     {"self_consistency": 1, "vote": 1, "self_consistency_table": 1}),
    # a new strategy: its runs on both world sizes; the timing sets it against one at a time
    ({"grpo": {"strategies": ["sequential", "batched"]}}, None,
     {"grpo": 2, "grpo_table": 1, "story_table": 1, "time_training": 1, "appendix_e_table": 1}),
    ({"grpo": {"strategies": ["sequential", "batched"]}}, GRPO, {"grpo": 2, "grpo_table": 1}),
    # fewer runs: the tables that listed them, nothing else
    ({"grpo": {"world_sizes": [1]}}, None, {"grpo_table": 1, "story_table": 1}),
    # `auto`: the probe, whatever the target (the chosen size's point is planned once it ran;
    # the one-at-a-time point reruns for the new strategy list)
    (AUTO, None, {"autotune": 1, "autotune_table": 1, "time_generation": 1, "evaluate_table": 1,
                  "workload_table": 1, "appendix_e_table": 1}),
    (AUTO, EVALUATE, {"autotune": 1, "time_generation": 1, "evaluate_table": 1}),
    # a setting that changes a run's result
    ({"self_consistency": {"temperature": 0.7}}, None,
     {"self_consistency": 1, "vote": 1, "time_generation": 2, "self_consistency_table": 1,
      "self_consistency_curve_table": 1, "story_table": 1, "appendix_e_table": 1}),
    # distillation's students are evaluated (and timed on the curves) wherever they appear
    ({"distill": {"lr": 1e-3}}, None,
     {"distill": 4, "evaluate": 5, "grade": 5, "time_generation": 4, "time_training": 1,
      "distill_table": 1, "evaluate_table": 1, "workload_table": 1,
      "self_consistency_curve_table": 1, "story_table": 1, "appendix_e_table": 1}),
    ({"pretrain": {"steps": 30}}, GRPO, {"pretrain": 1, "grpo": 4, "grpo_table": 1}),
    # a new model and a new seed: their whole chain, the shared data and tokenizer once
    ({"evaluate": {"models": ["toy-distilled-bs4-cpu", "toy"]}}, EVALUATE,
     {"tokenize": 1, "evaluate": 1, "grade": 1, "time_generation": 2, "evaluate_table": 1}),
    ({"seeds": [0, 1]}, EVALUATE,
     {"build_toy_model": 1, "pretrain": 1, "distill": 1, "tokenize": 1, "evaluate": 1,
      "grade": 1, "time_generation": 2, "evaluate_table": 1}),
    # what cannot be planned stops at parse time, naming the key
    (NO_TRAIN_SPLIT, None, "grpo.datasets names 'math500', which has no train split"),
    (NO_TRAIN_SPLIT, GRPO, "grpo.datasets names 'math500', which has no train split"),
    # issue 56: a path the config names is checked before any job, whatever the target (a
    # missing one was "Nothing to be done": Snakemake took the old table for a source file)
    (local_model("/nonexistent"), None, "models.mine.path /nonexistent: no such directory"),
    (local_model("/nonexistent"), EVALUATE, "models.mine.path /nonexistent: no such directory"),
    (local_model("results"), None, "models.mine.path results: no config.json, tokenizer.json, "
                                   "weights (model.safetensors or model.safetensors.index.json)"),
    (local_model(TOY_MODEL), None,
     {"tokenize": 1, "evaluate": 1, "grade": 1, "time_generation": 2, "evaluate_table": 1,
      "workload_table": 1, "appendix_e_table": 1}),
    (LOCAL_DATA, None, "datasets.mydata.path /nonexistent.json: no such file"),
    (LOCAL_DATA, EVALUATE, "datasets.mydata.path /nonexistent.json: no such file"),
    ({"distill": {"teacher": {"source": "local", "path": "/nonexistent.json"}}}, None,
     "distill.teacher.path /nonexistent.json: no such file"),
]


@pytest.mark.parametrize("change, target, expected", PLANS)
def test_every_config_change_is_planned_or_refused(workdir, change, target, expected):
    edit_config(workdir, lambda config: config.update(merged(config, change)))
    args = ["-n", target] if target else ["-n"]
    if isinstance(expected, str):
        proc = snakemake(workdir, *args, env=library_env(workdir), check=False)
        assert proc.returncode != 0 and expected in proc.stdout + proc.stderr, proc.stderr
        assert not re.search(r"^(?:local)?rule \w+:$", proc.stdout, re.M)  # no job ran
    else:
        assert run(workdir, *args) == expected


def test_a_truncated_local_model_stops_its_jobs_naming_the_file_and_the_entry(workdir):
    """Issue 56's bad file, run for real: the evaluation's jobs fail with the file, what is
    wrong and the config entry; no output of theirs is left and no finished output changes."""
    broken = workdir / "broken"
    shutil.copytree(workdir / TOY_MODEL, broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    edit_config(workdir, lambda config: config.update(merged(config, local_model("broken"))))
    before = snapshot(workdir)
    proc = snakemake(workdir, EVALUATE, env=library_env(workdir), check=False)
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "broken/model.safetensors: unreadable safetensors" in said, said[-3000:]
    assert "the job's model: config models.mine (source local, path broken)" in said
    after = snapshot(workdir)
    assert {path for path in before if after.get(path) != before[path]} == set()
    made = {path for path in after if path not in before and "/mine/" in path}
    assert made and all("/tokenized/" in path or "/logs/" in path or "/benchmarks/" in path
                        for path in made), sorted(made)


def test_io_edit_reruns_everything_that_imports_it_absolutely_or_not(workdir):
    assert "core.io" in imported_modules(REPO / "src/batched_reasoning/data/hub.py")  # absolute
    assert "core.io" in module_closure("data.hub")
    edit_module(workdir, "core.io", "def read_jsonl(", "def read_jsonl(  # same code\n")
    assert run(workdir, "-n") == {}  # a comment only
    edit_module(workdir, "core.io", "indent=2, sort_keys=True", "indent=1, sort_keys=True")
    planned = run(workdir, "-n")
    assert {"make_arith", "build_toy_model", "pretrain", "tokenize", "evaluate", "grpo",
            "distill", "evaluate_table"} <= set(planned)


def test_killed_distillation_restarts_from_a_changed_base_model(workdir):
    """Kill a distillation mid-run (and Snakemake with it), change the model it starts from,
    rerun: the stale checkpoint is discarded, training starts from the new base."""
    edit_config(workdir, lambda c: c["distill"].update(epochs=20))
    target = "results/seed0/distill/toy/arith/bs1/cpu/ws1/metrics.json"
    run_dir = workdir / target.removesuffix("/metrics.json")
    cmd = [*SNAKEMAKE, target, "--cores", "1", "--configfile", "tiny.yaml"]
    proc = subprocess.Popen(cmd, cwd=workdir, env=library_env(workdir), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    while not list(run_dir.glob("checkpoints/step-*/trainer_state.pt")):
        assert proc.poll() is None and time.time() < deadline, "distillation ended unkilled"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    locked = snakemake(workdir, target, env=library_env(workdir), check=False)
    assert locked.returncode != 0 and "--unlock" in locked.stdout + locked.stderr
    snakemake(workdir, "--unlock", env=library_env(workdir))

    edit_config(workdir, lambda c: c["pretrain"].update(lr=1e-3))  # a new base model
    ran = run(workdir, target)
    assert ran["pretrain"] == 1 and ran["distill"] == 1
    metrics = read_json(run_dir / "metrics.json")
    assert metrics["resumed_from_step"] == 0
    log = (workdir / "results/seed0/logs/distill/toy/arith/bs1/cpu/ws1.log").read_text()
    assert "discarding checkpoints of another run (changed: start" in log
