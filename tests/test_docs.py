"""Every command README.md and docs/ give is run, so none can rot.

Each documented command (`doc_commands.documented_commands`) is run in one of three places:
- by CI, word for word (`.ci/run` and the `.ci/user-*.sh` it calls: the quick start's default
  run, the rerun and report commands on that run, the installs, the SLURM service);
- by a test in this module, word for word in a scratch folder that holds the files it names,
  with the substitutions written beside it (the tiny model for Qwen3-0.6B's shape; a dry run
  where the real run needs a site's cluster);
- by a named test elsewhere that runs it at a smaller scale (the five-seed story check, the
  Qwen config from a Hugging Face cache), whose source must hold the command's key words.
A command added to the documents without a place fails `test_every_documented_command_is_run`.
"""

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from conftest import shared_file
from test_appendix_e import BOOK, CONFIGURED, inputs, training_metrics
from test_curve import write_point
from doc_commands import REPO, ci_commands, documented_commands, run_by_ci
from workflow_helpers import copy_workflow

from batched_reasoning.bench.cli import main as bench_main
from batched_reasoning.workflow.appendix_e import appendix_table
from batched_reasoning.world.toy_tokenizer import train_toy_tokenizer

CI = "CI"
README_BENCH = (
    "python -m batched_reasoning.bench --checkpoint ckpt --prompts math500_test.json --n-prompts 16 "
    "--batch-sizes 1,8,16 --strategies batched_stop,continuous --answer-lengths 16,32 "
    "--transformers --dtype bfloat16 --threads 2 --cpu-class avx2 --csv avx2-bfloat16.csv")
README_SUMMARY = "python -m batched_reasoning.bench.summary native-*.csv avx512-bf16-*.csv avx2-*.csv"
MAKE_CHECKPOINT = ("python -m batched_reasoning.bench --make-checkpoint ckpt/qwen3-0.6b-random "
                   "--shape qwen3-0.6b --tokenizer path/to/tokenizer.json")
BENCH = (
    "python -m batched_reasoning.bench --checkpoint ckpt/qwen3-0.6b-random --prompts "
    "math500_test.json --n-prompts 16 --batch-sizes 1,4,8,16 --strategies batched_stop,continuous "
    "--answer-lengths 16,256 --book --transformers --dtype bfloat16 --csv bench.csv --json bench.json")
COMPILED_BENCH = (
    "python -m batched_reasoning.bench --checkpoint ckpt/qwen3-0.6b-random --prompts "
    "math500_test.json --n-prompts 16 --strategies batched_stop --answer-lengths 16,32 "
    "--transformers --threads 2 --batch-sizes 1 --dtype bfloat16 --compile on --csv compiled.csv")
BENCH_MEMORY = (
    "python -m batched_reasoning.bench.memory --checkpoint ckpt/qwen3-0.6b-random --prompts "
    "math500_test.json --batch-sizes 1,4,8,16 --dtype float32 --csv memory.csv --json memory.json")
LLAMA_BUILD = "python -m batched_reasoning.bench.llama_cpp build ~/llama.cpp"
LLAMA_CONVERT = ("python -m batched_reasoning.bench.llama_cpp convert ckpt/qwen3-0.6b-random "
                 "qwen3-0.6b-random.gguf --llama-cpp ~/llama.cpp --outtype bf16")
LLAMA_BENCH = (
    "python -m batched_reasoning.bench --checkpoint ckpt/qwen3-0.6b-random --prompts "
    "math500_test.json --n-prompts 16 --batch-sizes 1,8,16 --strategies batched_stop,continuous "
    "--answer-lengths 16,128 --dtype bfloat16 --threads 2 --csv bench.csv --llama-batched-bench "
    "~/llama.cpp/build/bin/llama-batched-bench --gguf qwen3-0.6b-random.gguf")
CLUSTER = ("snakemake --workflow-profile profiles/slurm --default-resources "
           "slurm_account=MYACCOUNT slurm_partition=MYPARTITION")
CLUSTER_SITE = "snakemake --profile mysite --workflow-profile profiles/slurm --configfile mysite.yaml"
SLURM_WATCH = ["sinfo", "squeue -u $USER", "sacct -X -o JobID,JobName%40,Comment%30,State,Elapsed"]
MERGE = "python -m batched_reasoning.workflow.merge laptop/results gpu/results --out merged"
FAST_TIER = 'python -m pytest -m "not slow"'
CONDA_RUN = "snakemake --cores 1 --sdm conda"
REAL_MODEL = "tests/test_real_path.py::test_the_qwen_config_runs_offline_from_the_hugging_face_cache"
GPU_CHECK = "tests/test_gpu_check.py::test_every_part_runs_on_the_cpu"
FIRST_LOOK = ("tests/test_first_look.py::"
              "test_the_first_look_fills_appendix_e_offline_on_real_shaped_data")
APPENDIX_E = ("tests/test_real_path.py::"
              "test_the_appendix_e_config_plans_the_books_four_workloads_apart_offline")

# Where each documented command runs: CI, a test of this module, or (test, its key words).
RUN_BY = {
    "python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 && "
    "pip install -e . && snakemake --cores 1": CI,
    "pip install torch==2.13.0": CI,  # the quick start's torch step, named in its prose
    "pip install -e '.[dev,slurm]' && pip install --no-deps reasoning-from-scratch==0.2.0 && "
    "python -m pytest -q": CI,
    "snakemake --cores 1": CI,
    "snakemake --cores all": CI,
    "snakemake --report results/report.zip": CI,
    "snakemake": CI,
    "snakemake -n": CI,
    "snakemake -n results/tables/evaluate.tsv": CI,
    "snakemake --summary": CI,
    "snakemake --touch": CI,
    "snakemake --cleanup-metadata FILE…": CI,
    "snakemake --unlock": CI,
    "snakemake --forcerun grpo distill": CI,
    "pip install -e '.[slurm]'": CI,
    ".ci/slurm/up.sh": CI,
    ".ci/slurm/down.sh": CI,
    "python -m batched_reasoning.bench.llama_cpp build DIR": CI,
    README_BENCH: "test_readme_benchmark_on_each_cpu_class_and_its_summary",
    README_SUMMARY: "test_readme_benchmark_on_each_cpu_class_and_its_summary",
    MAKE_CHECKPOINT: "test_benchmarking_commands",
    BENCH: "test_benchmarking_commands",
    BENCH_MEMORY: "test_benchmarking_commands",
    COMPILED_BENCH: "test_benchmarking_commands",
    LLAMA_BUILD: "test_llama_cpp_commands",
    LLAMA_CONVERT: "test_llama_cpp_commands",
    LLAMA_BENCH: "test_llama_cpp_commands",
    MERGE: "test_merging_the_curves_of_two_machines",
    "python -m pytest -q": CI,
    FAST_TIER: "test_the_fast_tier_leaves_out_only_the_slow_tests",
    CONDA_RUN: "test_conda_run_plans_its_environment",
    "snakemake --lint": ("tests/test_workflow.py::test_lint_and_format", ["--lint"]),
    CLUSTER: "test_cluster_commands_plan_their_jobs",
    CLUSTER_SITE: "test_cluster_commands_plan_their_jobs",
    **{command: "test_slurm_watching_commands" for command in SLURM_WATCH},
    "snakemake --cores 1 --configfile configs/qwen3-0.6b-math500.yaml":
        (REAL_MODEL, ["configs/qwen3-0.6b-math500.yaml"]),
    "snakemake --cores 4 --configfile configs/qwen3-0.6b-math500.yaml":
        (REAL_MODEL, ["configs/qwen3-0.6b-math500.yaml"]),
    "snakemake --cores 4 --configfile configs/appendix-e.yaml":
        (APPENDIX_E, ["configs/appendix-e.yaml"]),
    "snakemake --cores 4 --configfile configs/appendix-e.yaml configs/appendix-e-first-look.yaml":
        (FIRST_LOOK, ["configs/appendix-e.yaml", "configs/appendix-e-first-look.yaml"]),
    "python -m batched_reasoning.gpu_check --out gpu-check --tokenizer "
    "gpu-check-inputs/qwen3-tokenizer.json --prompts gpu-check-inputs/math500_test.json":
        (GPU_CHECK, ["gpu_check(inputs, out)"]),
    "python -m batched_reasoning.workflow.story --seeds 0-4 --cpu-classes native,avx2":
        ("tests/test_story.py::test_the_story_check_runs_every_seed_on_every_cpu_class",
         ["batched_reasoning.workflow.story", "--seeds", "--cpu-classes", "native,avx2"]),
}
# As many problems as the largest documented batch, so that every batch size is a real one.
PROBLEMS = [f"Ann has {n} apples and gets {3 * n + 1} more. How many apples does Ann have?"
            for n in range(8)] + [f"Find the remainder when 2^{n} is divided by 7." for n in range(8)]


def test_every_documented_command_is_run():
    documented = documented_commands()
    unplaced = {c: where for c, where in documented.items() if c not in RUN_BY}
    assert not unplaced, f"documented commands that nothing runs (add each to RUN_BY): {unplaced}"
    gone = [c for c in RUN_BY if c not in documented]
    assert not gone, f"RUN_BY holds commands no document gives any more: {gone}"
    ci = ci_commands()
    tests_here = {node.name for node in ast.parse(Path(__file__).read_text()).body
                  if isinstance(node, ast.FunctionDef)}
    for command, place in RUN_BY.items():
        if place == CI:
            assert not run_by_ci(command, ci), (
                f"{command!r} ({documented[command]}): CI does not run {run_by_ci(command, ci)}")
        elif isinstance(place, str):
            assert place in tests_here, f"{command!r}: no test {place} here"
        else:
            test, key_words = place
            path, name = test.split("::")
            functions = {node.name: ast.get_source_segment((REPO / path).read_text(), node)
                         for node in ast.parse((REPO / path).read_text()).body
                         if isinstance(node, ast.FunctionDef)}
            assert name in functions, f"{command!r}: {test} does not exist"
            missing = [word for word in key_words if word not in functions[name]]
            assert not missing, f"{command!r}: {test} does not use {missing}"


def test_a_command_ci_does_not_run_is_found():
    """The check above can fail: a documented flag CI's line lacks, a command it never runs."""
    ci = ci_commands()
    assert run_by_ci("snakemake --cores 1", ci) == []
    assert run_by_ci("snakemake --cores 2", ci) == ["snakemake --cores 2"]
    assert run_by_ci("pip install -e . && snakemake --dag", ci) == ["snakemake --dag"]
    assert run_by_ci("snakemake --cleanup-metadata FILE…", ci) == []  # a placeholder: any file


def shell(command: str, cwd: Path, env: dict | None = None, timeout: int = 900):
    """Run a documented command as a reader would, in `cwd`, with this interpreter first on the
    PATH (so `python` is the one the tests run under)."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    proc = subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=os.environ | {"PATH": path} | (env or {}))
    assert proc.returncode == 0, f"{command}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def scratch_with_model_files(root: Path, tokenizer: Path | None = None) -> Path:
    """A folder holding what the benchmark commands name: `path/to/tokenizer.json` (`tokenizer`,
    or a toy one) and `math500_test.json` (16 problems in MATH-500's format)."""
    (root / "path/to").mkdir(parents=True)
    if tokenizer is None:
        train_toy_tokenizer(PROBLEMS * 4, vocab_size=300).save(str(root / "path/to/tokenizer.json"))
    else:
        shutil.copy(tokenizer, root / "path/to/tokenizer.json")
    (root / "math500_test.json").write_text(json.dumps([{"problem": p, "answer": "1"}
                                                        for p in PROBLEMS]))
    return root


def tiny(command: str) -> str:
    """Qwen3-0.6B's shape as the tiny one: the same command at a size a test can afford."""
    assert "--shape qwen3-0.6b" in command
    return command.replace("--shape qwen3-0.6b", "--shape tiny")


@pytest.mark.slow
def test_readme_benchmark_on_each_cpu_class_and_its_summary(tmp_path):
    """The README's per-class benchmark (`ckpt` here: the tiny model), run for each class as the
    README ran it, then its summary over the three runs."""
    scratch = scratch_with_model_files(tmp_path)
    bench_main(["--make-checkpoint", str(scratch / "ckpt"), "--shape", "tiny",
                "--tokenizer", str(scratch / "path/to/tokenizer.json")])
    # a test worker beside others has one CPU of its own (tests/conftest.py)
    threads = "--threads 2" if os.environ.get("OMP_NUM_THREADS") != "1" else "--threads 1"
    for cpu_class in ("avx2", "avx512-bf16", "native"):
        shell(README_BENCH.replace("avx2", cpu_class).replace("--threads 2", threads), scratch)
    summary = shell(README_SUMMARY, scratch)
    for cpu_class in ("avx2", "avx512-bf16", "native"):
        assert cpu_class in summary
        table = pd.read_csv(scratch / f"{cpu_class}-bfloat16.csv")
        assert set(table.cpu_class) == {cpu_class}
        assert set(table.batch_size) == {1, 8, 16}


@pytest.mark.slow
def test_benchmarking_commands(tmp_path):
    scratch = scratch_with_model_files(tmp_path)
    shell(tiny(MAKE_CHECKPOINT), scratch)
    shell(BENCH, scratch)
    table = pd.read_csv(scratch / "bench.csv")
    assert {"ours", "book", "transformers"} <= set(table.implementation)
    assert json.loads((scratch / "bench.json").read_text())["rows"]
    shell(BENCH_MEMORY, scratch)
    memory = pd.read_csv(scratch / "memory.csv")
    assert sorted(memory.batch_size) == [1, 4, 8, 16]
    shell(COMPILED_BENCH, scratch)
    compiled = pd.read_csv(scratch / "compiled.csv")
    assert set(compiled.set_index("implementation").loc[["ours"], "decode_mode"]) == {"compiled"}
    assert pd.read_csv(scratch / "compiled-decode.csv").decode_mode.tolist() == ["compiled"]


@pytest.mark.skipif(not os.environ.get("LLAMA_CPP"),
                    reason="needs a llama.cpp built by `python -m batched_reasoning.bench.llama_cpp "
                           "build DIR` named by LLAMA_CPP")
def test_llama_cpp_commands(tmp_path):
    """docs/benchmarking.md's llama.cpp commands, with `~/llama.cpp` as the one LLAMA_CPP names
    (built, so the build command only checks it), on Qwen3's tokenizer (llama.cpp's converter
    knows its pre-tokenizer, not the toy one's)."""
    def here(command: str) -> str:
        return command.replace("~/llama.cpp", os.environ["LLAMA_CPP"])

    scratch = scratch_with_model_files(tmp_path, shared_file("qwen3-tokenizer.json"))
    shell(tiny(MAKE_CHECKPOINT), scratch)
    for command in (LLAMA_BUILD, LLAMA_CONVERT, LLAMA_BENCH):
        shell(here(command), scratch, timeout=1800)
    peer = pd.read_csv(scratch / "bench-llama.csv")  # llama.cpp's rows, beside ours
    assert peer.batch_size.tolist() == [1, 8, 16] and (peer.tokens_per_s > 0).all()


def test_merging_the_curves_of_two_machines(tmp_path):
    """The merge command on two runs' curves (a laptop's and another machine's): one table and
    figure, each machine's rows beside the other's, speedups only within a machine."""
    for name, cpu, speed in (("laptop", "Laptop CPU", 100.0), ("gpu", "Big GPU", 1000.0)):
        for size, runs in ((1, {"sequential": speed}), (4, {"batched": 3 * speed})):
            write_point(tmp_path / name / f"results/seed0/curve/evaluate/m/d/bs{size}/cpu/t1",
                        1, size, runs, {}, cpu=cpu)
        timing = training_metrics(tmp_path / f"{name}.json", "grpo", {
            ("sequential", 1): [1.0, 1.0, 1.0], ("batched_stop", 8): [1 / 3, 1 / 3, 1 / 3]})
        metrics = json.loads(Path(timing).read_text())
        metrics["machine"]["cpu"] = cpu
        Path(timing).write_text(json.dumps(metrics))
        (tmp_path / name / "results/tables").mkdir(parents=True)
        appendix_table(inputs(training=[timing]), CONFIGURED, BOOK).to_csv(
            tmp_path / name / "results/tables/appendix_e.tsv", sep="\t", index=False)
    printed = shell(MERGE, tmp_path)
    # Appendix E's table: a column group per machine beside the book's
    assert "merged/appendix_e.tsv" in printed
    appendix = pd.read_csv(tmp_path / "merged/appendix_e.tsv", sep="\t")
    grpo = appendix[(appendix.workload == "grpo") & (appendix["mode"] == "batched")].iloc[0]
    for cpu in ("Laptop CPU", "Big GPU"):
        assert grpo[f"speedup ({cpu}, 1 thread, float32)"].startswith("3.00")
    assert grpo["book_h100_min"] == 19.0
    assert (tmp_path / "merged/appendix_e.png").stat().st_size > 10_000
    assert "merged/evaluate.tsv" in printed
    table = pd.read_csv(tmp_path / "merged/evaluate.tsv", sep="\t")
    assert set(table.machine) == {"Laptop CPU, 1 thread", "Big GPU, 1 thread"}
    assert sorted(table.speedup.round(6)) == [1.0, 1.0, 3.0, 3.0]
    assert "| machine" in (tmp_path / "merged/evaluate.md").read_text()
    assert (tmp_path / "merged/evaluate.png").stat().st_size > 10_000


@pytest.mark.slow
def test_the_fast_tier_leaves_out_only_the_slow_tests():
    """The README's loop while changing code, collected only (`--collect-only`: running it here
    would run most of this suite a second time): the tests marked `slow`, one by one or a whole
    module, are left out, the fast ones kept."""
    listed = shell(FAST_TIER + " --collect-only -q -p no:cacheprovider", REPO)
    tests = [line for line in listed.splitlines() if "::" in line]
    assert "deselected" in listed.splitlines()[-1]
    assert "tests/test_docs.py::test_every_documented_command_is_run" in tests
    assert "tests/test_docs.py::test_the_fast_tier_leaves_out_only_the_slow_tests" not in tests
    assert not [test for test in tests if test.startswith("tests/test_workflow.py::")]


@pytest.mark.slow
def test_cluster_commands_plan_their_jobs(tmp_path):
    """docs/cluster.md's two SLURM commands as dry runs (`-n`) of the default config: the site's
    account and partition reach every job. (tests/test_slurm_workflow.py runs the profile on a
    real one-node SLURM.) The user profile and site config are the document's own blocks."""
    workdir = copy_workflow(tmp_path / "run")
    plan = shell(CLUSTER + " -n", workdir)
    assert "slurm_account=MYACCOUNT" in plan and "slurm_partition=MYPARTITION" in plan
    blocks = re.findall(r"```yaml\n(.*?)```", (REPO / "docs/cluster.md").read_text(), re.S)
    (workdir / "mysite").mkdir()
    (workdir / "mysite/config.yaml").write_text(textwrap.dedent(blocks[0]))
    (workdir / "mysite.yaml").write_text(textwrap.dedent(blocks[1]))
    plan = shell(CLUSTER_SITE + " -n", workdir)
    assert "slurm_account=MYACCOUNT" in plan and "slurm_partition=short" in plan


@pytest.mark.skipif(shutil.which("conda") is None,
                    reason="needs conda (docs/reproducibility.md's `--sdm conda` run builds its "
                           "environment with it)")
def test_conda_run_plans_its_environment(tmp_path):
    """docs/reproducibility.md's conda run as a dry run (`-n`: building the environment downloads
    PyTorch): Snakemake accepts the environment file and would build it for the jobs."""
    workdir = copy_workflow(tmp_path / "run")
    plan = shell(CONDA_RUN + " -n", workdir)
    assert "workflow/envs/batched-reasoning.yaml will be created" in plan


@pytest.mark.skipif(shutil.which("sinfo") is None
                    or subprocess.run(["sinfo"], capture_output=True).returncode != 0,
                    reason="needs a SLURM cluster that answers (CI starts one: .ci/slurm/up.sh)")
def test_slurm_watching_commands(tmp_path):
    user = {"USER": os.environ.get("USER") or subprocess.run(
        ["id", "-un"], capture_output=True, text=True).stdout.strip()}
    for command in SLURM_WATCH:
        shell(command, tmp_path, env=user)
