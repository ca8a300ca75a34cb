"""The GPU check (`python -m batched_reasoning.gpu_check`) on the CPU: every part that does not
need CUDA runs on a tiny shape, the CUDA-only tests are collected and skipped, and a failing
part makes the command fail without hiding the others."""

import json
import subprocess
import sys

import pandas as pd
import pytest
from conftest import SHARED_DATA
from workflow_helpers import REPO

from batched_reasoning.gpu_check.check import parse_args
from batched_reasoning.world.toy_tokenizer import train_toy_tokenizer

MATH500 = SHARED_DATA / "math500_test.json"


def test_a_typo_in_the_command_names_what_is_wrong(tmp_path, capsys):
    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_text("{}")
    with pytest.raises(SystemExit):
        parse_args(["--out", "x", "--tokenizer", str(tokenizer), "--prompts", str(tmp_path / "no.json")])
    error = capsys.readouterr().err
    assert "--prompts" in error and "no.json: no such file" in error
    with pytest.raises(SystemExit):
        parse_args(["--out", "x", "--tokenizer", str(tokenizer), "--prompts", str(tokenizer),
                    "--parts", "checkpoint,benchmarks"])
    assert "unknown benchmarks" in capsys.readouterr().err


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    if not MATH500.is_file():
        pytest.skip("needs ../shared/data/math500_test.json")
    root = tmp_path_factory.mktemp("gpu-check")
    records = json.loads(MATH500.read_text())
    train_toy_tokenizer([r["problem"] + " " + r["solution"] for r in records[:200]], 400
                        ).save(str(root / "tokenizer.json"))
    return root


def gpu_check(inputs, out, *extra):
    cmd = [sys.executable, "-m", "batched_reasoning.gpu_check", "--out", str(out), "--device",
           "cpu", "--tokenizer", str(inputs / "tokenizer.json"), "--prompts", str(MATH500),
           "--cores", "2", *extra]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1200)


@pytest.mark.slow
def test_every_part_runs_on_the_cpu(inputs, tmp_path):
    out = tmp_path / "check"
    proc = gpu_check(inputs, out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    parts = {p["name"]: p for p in json.loads((out / "summary.json").read_text())["parts"]}
    assert list(parts) == ["checkpoint", "cuda_tests", "benchmark", "appendix_e"]
    assert parts["checkpoint"]["status"] == parts["benchmark"]["status"] == "passed"
    assert parts["appendix_e"]["status"] == "passed"
    # no CUDA here: the CUDA-only tests are all found, and none runs
    assert parts["cuda_tests"]["status"] == "skipped"
    assert " 0 ran" in parts["cuda_tests"]["detail"]
    assert not parts["cuda_tests"]["detail"].startswith("0 collected")
    bench = pd.read_csv(out / "bench-eager.csv")
    assert set(bench.implementation) == {"ours", "transformers"} and set(bench.batch_size) == {1, 8}
    assert (pd.read_csv(out / "bench-compiled.csv").implementation == "ours").all()
    table = pd.read_csv(out / "appendix_e.tsv", sep="\t")
    assert len(table) == 8 and set(table.device) == {"cpu"}
    assert table.speedup_lo.notna().sum() == 4  # 3 repeats: every batched row has an interval
    summary = (out / "summary.md").read_text()
    assert "## Benchmark" in summary and "roofline bound" in summary and "Appendix E" in summary

    # a later call runs one part again and keeps the others' lines
    proc = gpu_check(inputs, out, "--parts", "cuda_tests")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    again = [p["name"] for p in json.loads((out / "summary.json").read_text())["parts"]]
    assert again == ["checkpoint", "cuda_tests", "benchmark", "appendix_e"]


@pytest.mark.slow
def test_a_failing_part_fails_the_check_and_the_rest_still_run(inputs, tmp_path):
    """Negative control: a CUDA-only test that fails (as a broken CUDA path would)."""
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_broken.py").write_text(
        "import pytest\n\n\n@pytest.mark.cuda\ndef test_broken():\n    assert False\n")
    out = tmp_path / "check"
    proc = gpu_check(inputs, out, "--tests", str(tests), "--parts", "checkpoint,cuda_tests,benchmark")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    parts = {p["name"]: p for p in json.loads((out / "summary.json").read_text())["parts"]}
    assert parts["cuda_tests"]["status"] == "failed" and "1 failed" in parts["cuda_tests"]["detail"]
    assert parts["benchmark"]["status"] == "passed"
    assert "| cuda_tests | failed |" in (out / "summary.md").read_text()
