"""The workflow through a real SLURM scheduler (started by .ci/slurm/up.sh), and the profile's requests."""

import json
import shutil
import subprocess

import pytest
import yaml
from workflow_helpers import SNAKEMAKE, TINY_CONFIG, copy_workflow, snakemake

pytest.importorskip("snakemake_executor_plugin_slurm")
pytestmark = pytest.mark.slow  # Snakemake runs (dry ones too: ~10 s each)


def dry_run_resources(workdir):
    """(rule, wildcards, resources) of every job a dry run with the SLURM profile plans."""
    out = snakemake(workdir, "-n", "--workflow-profile", "profiles/slurm").stdout
    jobs, current = [], None
    for line in out.splitlines():
        line = line.strip()
        if line.startswith(("rule ", "localrule ", "checkpoint ")):
            current = {"rule": line.split()[1].rstrip(":")}
            jobs.append(current)
        elif current is not None and ":" in line:
            key, value = line.split(":", 1)
            if key in ("wildcards", "resources"):
                current[key] = dict(p.strip().split("=", 1) for p in value.split(",") if "=" in p)
    return jobs


def test_profile_asks_gpus_only_for_cuda_and_host_memory_grows_with_a_cpu_batch(tmp_path):
    config = yaml.safe_load(yaml.safe_dump(TINY_CONFIG))
    config["evaluate"] |= {"devices": ["cpu", "cuda"], "batch_sizes": [1, 4, 16]}
    jobs = dry_run_resources(copy_workflow(tmp_path, config))
    evaluations = [j for j in jobs
                   if j["rule"] == "time_generation" and j["wildcards"]["stage"] == "evaluate"]
    assert len(evaluations) == 2 * 3  # devices x curve points (every strategy of a size in one)
    for job in evaluations:
        assert job["resources"]["gpu"] == ("1" if job["wildcards"]["device"] == "cuda" else "0")
    memory = {(j["wildcards"]["device"], int(j["wildcards"]["batch_size"])):
              int(j["resources"]["mem_mb"]) for j in evaluations}
    assert memory["cpu", 1] < memory["cpu", 4] < memory["cpu", 16]
    # a GPU job's batch lives in GPU memory: its host request does not grow with the batch
    assert memory["cuda", 1] == memory["cuda", 16]


def test_multi_rank_training_asks_one_task_with_cpus_or_a_gpu_per_rank(tmp_path):
    config = yaml.safe_load(yaml.safe_dump(TINY_CONFIG))
    config["threads"] = 3
    for stage in ("grpo", "distill"):
        config[stage] |= {"devices": ["cpu", "cuda"], "world_sizes": [1, 2]}
    jobs = dry_run_resources(copy_workflow(tmp_path, config))
    training = [j for j in jobs if j["rule"] in ("grpo", "distill")]
    assert {(j["rule"], j["wildcards"]["world_size"]) for j in training} == {
        (rule, size) for rule in ("grpo", "distill") for size in ("1", "2")}
    for job in training:
        ranks = int(job["wildcards"]["world_size"])
        assert int(job["resources"]["cpus_per_task"]) == 3 * ranks
        assert int(job["resources"]["gpu"]) == (ranks if job["wildcards"]["device"] == "cuda" else 0)
        assert "tasks" not in job["resources"]  # one task: torchrun starts the ranks itself
    memory = {(j["rule"], j["wildcards"]["world_size"], j["wildcards"]["batch_size"],
               j["wildcards"]["device"]): int(j["resources"]["mem_mb"]) for j in training}
    assert memory["distill", "2", "4", "cpu"] > memory["distill", "1", "4", "cpu"]


def test_a_probe_asks_for_the_node_of_the_jobs_it_sizes(tmp_path):
    """`auto`'s probe is a job like the ones it sizes: a GPU for a CUDA probe, the stage's
    partition, and the memory budget it will measure against."""
    config = yaml.safe_load(yaml.safe_dump(TINY_CONFIG))
    config["evaluate"] |= {"devices": ["cpu", "cuda"], "batch_sizes": ["auto"]}
    config["memory_budget_mb"] = {"cpu": 3000, "cuda": None, "mps": None}
    config["slurm_partition"] = {"cpu": "debug", "cuda": "gpu", "mps": None}
    jobs = dry_run_resources(copy_workflow(tmp_path, config))
    probes = {j["wildcards"]["device"]: j["resources"] for j in jobs if j["rule"] == "autotune"}
    assert set(probes) == {"cpu", "cuda"}
    assert probes["cuda"]["gpu"] == "1" and probes["cuda"]["slurm_partition"] == "gpu"
    assert probes["cpu"]["gpu"] == "0" and probes["cpu"]["slurm_partition"] == "debug"
    assert probes["cpu"]["mem_mb"] == "3000"
    assert all(p["timing"] == "1" for p in probes.values())  # nothing timed runs beside it


def test_every_timed_job_asks_for_a_node_of_its_own(tmp_path):
    """Jobs that time generation or training (`timing=1`) ask SLURM for their node alone; the
    others share. The profile's list of rules has to keep up with the rules."""
    config = yaml.safe_load(yaml.safe_dump(TINY_CONFIG))
    config["evaluate"] |= {"batch_sizes": [1, "auto"]}
    jobs = dry_run_resources(copy_workflow(tmp_path, config))
    timed = {j["rule"] for j in jobs if j.get("resources", {}).get("timing") == "1"}
    assert {"evaluate", "self_consistency", "grpo", "distill", "time_generation",
            "time_training", "autotune"} <= timed
    for job in jobs:
        resources = job.get("resources", {})
        owns_node = "--exclusive" in resources.get("slurm_extra", "")
        assert owns_node == (resources.get("timing") == "1"), job


def cluster_up():
    if not shutil.which("sinfo"):
        return False
    return subprocess.run(["sinfo", "-h"], capture_output=True, timeout=30).returncode == 0


def records(workdir, stage):
    """Everything a run decided, without its timings."""
    found = {}
    for path in sorted((workdir / "results").glob(f"seed*/{stage}/**/records.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        for row in rows:
            row.pop("latency_seconds", None)
        found[str(path.relative_to(workdir))] = rows
    return found


# What the cluster runs: every kind of job a stage submits, not every run of the tiny config.
CLUSTER_TARGETS = ["results/tables/evaluate.tsv", "results/tables/self_consistency.tsv",
                   "results/tables/self_consistency_curve.tsv",
                   "results/seed0/grpo/toy/arith/batched_stop/bs4/cpu/ws1/metrics.json"]


@pytest.mark.slurm
def test_workflow_runs_through_slurm(tiny_run, tmp_path):
    if not cluster_up():
        pytest.skip("no SLURM cluster running (start one with .ci/slurm/up.sh)")
    local = tiny_run[0]
    cluster = copy_workflow(tmp_path / "cluster")
    proc = subprocess.run(
        ["timeout", "-k", "30", "1500", *SNAKEMAKE, *CLUSTER_TARGETS,
         "--workflow-profile", "profiles/slurm",
         "--configfile", "tiny.yaml", "--jobs", "4", "--slurm-init-seconds-before-status-checks",
         "1", "--slurm-keep-successful-logs", "--retries", "0"],
        cwd=cluster, capture_output=True, text=True,
    )
    logs = "\n".join(p.read_text() for p in cluster.glob("results/**/logs/**/*.log"))
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}\n{logs}"

    log_root = cluster / ".snakemake/slurm_logs"  # rule_<rule>/<wildcards>/<jobid>.log
    slurm_logs = list(log_root.rglob("*.log"))
    job_ids = {p.stem for p in slurm_logs}
    submitted = {p.relative_to(log_root).parts[0] for p in slurm_logs}
    assert {"rule_pretrain", "rule_evaluate", "rule_self_consistency", "rule_grpo",
            "rule_distill", "rule_time_generation"} <= submitted
    assert not submitted & {"rule_evaluate_table", "rule_self_consistency_table"}, "tables run locally"
    accounting = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-o", "JobID,State", "-j", ",".join(sorted(job_ids))],
        capture_output=True, text=True, check=True,
    ).stdout
    states = dict(line.split("|") for line in accounting.splitlines())
    assert set(states) == job_ids and set(states.values()) == {"COMPLETED"}, accounting
    for stage in ("evaluate", "self_consistency", "curve"):  # training: test_pretrain/test_grpo
        made, made_locally = records(cluster, stage), records(local, stage)
        assert made and made == {path: made_locally[path] for path in made}
    for path in cluster.glob("results/seed0/curve/**/metrics.json"):  # timed on a node alone
        allocation = json.loads(path.read_text())["machine"]["allocation"]
        assert allocation["scheduler"] == "slurm" and allocation["exclusive"] is True, path
