"""Run the real workflow (real Snakemake, real files) in a temporary copy of the repository."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]

# A small but complete configuration: every stage runs, in seconds. The training stages also
# run on two data-parallel ranks of one thread each (a one-node SLURM here has two CPUs).
TINY_CONFIG = {
    "threads": 1,
    "datasets": {"arith": {"source": "arith", "n_train": 200, "n_test": 10}},
    "toy": {"vocab_size": 300, "hidden_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
            "intermediate_size": 64, "max_position_embeddings": 512},
    "pretrain": {"steps": 20, "batch_size": 8, "checkpoint_every": 10},
    # curves time the student of distillation at batch size 4 (the default config's reasoning
    # workload), each point three times: the fewest repeats that give an interval
    "evaluate": {"models": ["toy-distilled-bs4-cpu"], "batch_sizes": [1, 3], "max_new_tokens": 8,
                 "timed_problems": 4, "accuracy_batch_size": 3},
    "self_consistency": {"batch_sizes": [3], "num_samples": 3, "max_new_tokens": 8, "limit": 4,
                         "curve": {"models": ["toy-distilled-bs4-cpu"], "batch_sizes": [3],
                                   "problems": 2}},
    "timing": {"minimum_repeats": 3, "maximum_repeats": 3},
    "grpo": {"strategies": ["sequential", "batched_stop"], "batch_sizes": [4],
             "world_sizes": [1, 2], "steps": 4, "num_rollouts": 4,
             "max_new_tokens": 8, "checkpoint_every": 2, "eval_every": 2, "eval_problems": 4,
             "timed_steps": 2},
    "distill": {"batch_sizes": [1, 4], "world_sizes": [1, 2], "validation_size": 8,
                "log_every": 5, "checkpoint_every": 10, "timed_steps": 2},
}


def copy_workflow(destination: Path, config: dict | None = None) -> Path:
    destination.mkdir(parents=True, exist_ok=True)
    for name in ("Snakefile", "config.yaml", "workflow", "profiles", "configs"):
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, destination / name)
        elif source.exists():
            shutil.copy2(source, destination / name)
    (destination / "tiny.yaml").write_text(yaml.safe_dump(config or TINY_CONFIG))
    return destination


def snakemake(workdir: Path, *args: str, check: bool = True, timeout: int = 1800, env=None):
    # `--configfile` takes every value up to the next flag, so it comes last
    cmd = [*SNAKEMAKE, *args, "--cores", "2", "--configfile", "tiny.yaml"]
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=timeout,
                          env=env)
    if check and proc.returncode != 0:
        errors = failed_job_errors(workdir, proc.stdout + proc.stderr)
        raise AssertionError(f"{' '.join(cmd)} failed; from the failed jobs' logs:\n{errors}\n\n"
                             f"{proc.stdout}\n{proc.stderr}\n\nfrom the failed jobs' logs:\n{errors}")
    return proc


def failed_job_errors(workdir: Path, output: str, limit: int = 30) -> str:
    """The error lines of the logs of the jobs that failed, so that a report cut short in the
    middle (as long CI output is) still shows the cause at its start and end."""
    lines = []
    for log in dict.fromkeys(re.findall(r"^\s+log: (\S+) \(check log", output, re.M)):
        path = workdir / log
        text = path.read_text(errors="replace") if path.is_file() else ""
        found = [line for line in text.splitlines()
                 if re.search(r"Error|Exception|error:|Killed|exitcode", line)]
        lines += [f"{log}:"] + [f"    {line}" for line in found[-limit:]]
    return "\n".join(lines) or "(no log of a failed job found)"


def with_own_library(workdir: Path) -> Path:
    """The library copied into the work directory, for runs that import it from there
    (`PYTHONPATH`), so a test can edit a module without touching the repository."""
    shutil.copytree(REPO / "src", workdir / "src", ignore=shutil.ignore_patterns("*.egg-info"))
    return workdir


def copy_run(complete: Path, destination: Path) -> Path:
    """A finished run copied with its mtimes (copy2), so Snakemake sees it as finished."""
    shutil.copytree(complete, destination, symlinks=True)
    return destination


def library_env(workdir: Path) -> dict:
    """The environment of a run that imports the library from the work directory's copy."""
    return os.environ | {"PYTHONPATH": str(workdir / "src")}


def jobs_that_ran(proc: subprocess.CompletedProcess) -> dict[str, int]:
    """{rule: jobs} a finished `snakemake` process ran, from its output."""
    ran: dict[str, int] = {}
    for rule in re.findall(r"^(?:local)?(?:rule|checkpoint) (\w+):$", proc.stdout + proc.stderr,
                           re.M):
        ran[rule] = ran.get(rule, 0) + 1
    ran.pop("all", None)
    return ran


def complete_tiny_run(destination: Path) -> tuple[Path, dict[str, int]]:
    """A complete run of `TINY_CONFIG` that imports its own copy of the library
    (`with_own_library`), and the jobs it ran."""
    workdir = with_own_library(copy_workflow(destination))
    return workdir, jobs_that_ran(snakemake(workdir, env=library_env(workdir)))
