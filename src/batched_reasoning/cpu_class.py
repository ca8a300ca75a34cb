"""The classes of CPU a user may have, as this machine can act them out.

PyTorch and oneDNN pick their kernels by the instructions a CPU has; these environment
variables cap that choice, so one machine runs the code paths (and the rounding) of a laptop
without AVX-512, or of an AVX-512 CPU without AMX. A child process must get them before it
imports torch: they are read once, when the kernels are first dispatched.
"""

from __future__ import annotations

CPU_CLASSES: dict[str, dict[str, str]] = {
    "native": {},
    # a typical laptop: AVX2, no AVX-512
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    # AVX-512 with bfloat16 instructions but no AMX (e.g. AMD Zen 4/5)
    "avx512-bf16": {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"},
}


def cpu_class_env(name: str) -> dict[str, str]:
    """The environment variables that make a process run as CPU class `name`."""
    if name not in CPU_CLASSES:
        raise ValueError(f"unknown CPU class {name!r}; choose one of {', '.join(CPU_CLASSES)}")
    return dict(CPU_CLASSES[name])
