"""The classes of CPU a user may have, as this machine can act them out.

PyTorch and oneDNN pick their kernels by the instructions a CPU has; these environment
variables cap that choice, so one machine runs the code paths (and the rounding) of a laptop
without AVX-512, or of an AVX-512 CPU without AMX. A child process must get them before it
imports torch: they are read once, when the kernels are first dispatched.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

CPU_CLASSES: dict[str, dict[str, str]] = {
    "native": {},
    # a typical laptop: AVX2, no AVX-512
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    # AVX-512 with bfloat16 instructions but no AMX (e.g. AMD Zen 4/5)
    "avx512-bf16": {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"},
}


# every variable a class sets: a process runs as a class only if it has that class's and no other
CONTROLS = sorted({key for env in CPU_CLASSES.values() for key in env})


def cpu_class_env(name: str) -> dict[str, str]:
    """The environment variables that make a process run as CPU class `name`."""
    if name not in CPU_CLASSES:
        raise ValueError(f"unknown CPU class {name!r}; choose one of {', '.join(CPU_CLASSES)}")
    return dict(CPU_CLASSES[name])


def environment_for(name: str, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """`environ` for a child process that runs as class `name`: the class's variables set and
    the other classes' removed (a `native` child must not inherit its parent's caps)."""
    wanted = cpu_class_env(name)
    return {k: v for k, v in environ.items() if k not in CONTROLS} | wanted


def current_cpu_class(environ: Mapping[str, str] = os.environ) -> str:
    """The class this process runs as, read from its environment; `custom` for other caps."""
    caps = {key: environ[key] for key in CONTROLS if key in environ}
    return next((name for name, env in CPU_CLASSES.items() if env == caps), "custom")
