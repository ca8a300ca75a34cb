"""What a result needs to be reproduced: seed, config, code hash, package versions, device."""

from __future__ import annotations

import ast
import hashlib
import platform
from importlib import metadata
from pathlib import Path

import torch

PACKAGE_DIR = Path(__file__).resolve().parent
PACKAGES = ("torch", "safetensors", "tokenizers", "huggingface_hub", "math-verify", "snakemake")


def _imports(module: str) -> set[str]:
    """Package modules that `module` imports (relative `from .x import` statements)."""
    tree = ast.parse((PACKAGE_DIR / f"{module}.py").read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            names = [node.module] if node.module else [alias.name for alias in node.names]
            found.update(n.split(".")[0] for n in names if (PACKAGE_DIR / f"{n}.py").is_file())
    return found


def module_closure(*modules: str) -> list[str]:
    """`modules` and every package module they import, transitively, sorted."""
    seen, todo = set(), list(modules)
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(_imports(module))
    return sorted(seen)


def code_hash(*modules: str) -> str:
    """Content hash of the library code behind `modules` (all modules when none are named).

    Workflow rules carry it as a param, so editing a module reruns exactly the stages that
    import it, directly or not.
    """
    names = module_closure(*modules) if modules else sorted(p.stem for p in PACKAGE_DIR.glob("*.py"))
    digest = hashlib.sha256()
    for name in names:
        digest.update(name.encode() + b"\0" + (PACKAGE_DIR / f"{name}.py").read_bytes())
    return digest.hexdigest()[:16]


def resolve_device(name: str) -> torch.device:
    """The torch device for `name`, or a clear error if this machine has none."""
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(
                "device 'cuda' was requested but this machine has no usable CUDA GPU "
                f"(torch {torch.__version__}, cuda build: {torch.version.cuda}); "
                "remove 'cuda' from the config's devices or run on a GPU node"
            )
        return torch.device("cuda")
    if name == "mps":
        if not torch.backends.mps.is_available():
            raise RuntimeError("device 'mps' was requested but this machine has no Apple MPS")
        return torch.device("mps")
    raise ValueError(f"unknown device {name!r}; choose cpu, cuda or mps")


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "mps":
        return "Apple MPS"
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return f"{cpu} ({torch.get_num_threads()} threads)"


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def run_info(params: dict, device: torch.device, stage: str) -> dict:
    """Provenance block stored with every metrics file."""
    return {
        "seed": params.get("seed"),
        "config": params,
        "code_hash": code_hash(stage),
        "packages": package_versions(),
        "device": device.type,
        "device_name": device_name(device),
        "torch_version": torch.__version__,
    }
