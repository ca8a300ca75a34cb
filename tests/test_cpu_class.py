"""The CPU classes users have, acted out on this machine: the equivalence tests hold on each.

Kernels differ by class (AVX2 laptops, AVX-512 without AMX, AMX Xeons): other blockings, other
roundings, other fast paths. What must not differ is what the equivalence tests prove (batched
= sequential token for token, our logits = transformers', packed = plain), so they run again
here in child processes capped to each class. The caps only lower what a CPU has, so on a
machine below a class the child runs that machine's own kernels.
"""

import platform
import subprocess
import sys
from pathlib import Path

import pytest

from batched_reasoning.core.cpu_class import (
    CPU_CLASSES,
    cpu_class_env,
    current_cpu_class,
    environment_for,
)

REPO = Path(__file__).resolve().parents[1]
EQUIVALENCE_TESTS = ["tests/test_model.py", "tests/test_generation.py", "tests/test_continuous.py",
                     "tests/test_training.py"]
X86 = platform.machine().lower() in ("x86_64", "amd64")


def test_a_process_knows_the_class_it_runs_as():
    assert current_cpu_class({}) == "native"
    assert current_cpu_class({"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                              "HOME": "/x"}) == "avx2"
    assert current_cpu_class({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}) == "avx512-bf16"
    assert current_cpu_class({"ATEN_CPU_CAPABILITY": "avx2"}) == "custom"  # oneDNN uncapped


def test_a_child_gets_its_class_and_none_of_the_parents_caps():
    parent = {"PATH": "/bin", "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    assert environment_for("native", parent) == {"PATH": "/bin"}
    assert environment_for("avx512-bf16", parent) == {"PATH": "/bin",
                                                      "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}
    for name in CPU_CLASSES:
        assert current_cpu_class(environment_for(name, parent)) == name
    with pytest.raises(ValueError, match="unknown CPU class 'arm'; choose one of native, avx2"):
        cpu_class_env("arm")


def kernels_of(env: dict) -> tuple[str, str]:
    """(ATen's CPU capability, oneDNN's ISA line) a child process with `env` runs with."""
    probe = ("import torch; mkldnn = torch.ops.mkldnn; "
             "w = mkldnn._reorder_linear_weight(torch.ones(16, 32), None); "
             "mkldnn._linear_pointwise(torch.ones(4, 32), w, None, 'none', [], ''); "
             "print(torch.backends.cpu.get_cpu_capability())")
    out = subprocess.run([sys.executable, "-c", probe], env=env | {"ONEDNN_VERBOSE": "1"},
                         capture_output=True, text=True, check=True).stdout
    isa = next(line for line in out.splitlines() if ",isa:" in line)
    return out.strip().splitlines()[-1], isa


@pytest.mark.slow
@pytest.mark.skipif(not X86, reason="the classes cap x86 instruction sets")
@pytest.mark.parametrize("name", [name for name in CPU_CLASSES if name != "native"])
def test_equivalence_tests_pass_as_each_cpu_class(name):
    env = environment_for(name)
    capability, isa = kernels_of(env)
    assert "AMX" not in isa, isa
    if name == "avx2":
        assert capability == "AVX2" and "AVX-512" not in isa, (capability, isa)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          *EQUIVALENCE_TESTS], cwd=REPO, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout.splitlines()[-1]

