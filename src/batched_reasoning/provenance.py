"""What a result needs to be reproduced: seed, config, code hash, package versions, device."""

from __future__ import annotations

import ast
import hashlib
import platform
import time
from importlib import metadata
from pathlib import Path

import torch

from .calibration import choices_made
from .cpu_class import current_cpu_class
from .devices import device_name

PACKAGE_DIR = Path(__file__).resolve().parent
PACKAGES = ("torch", "safetensors", "tokenizers", "huggingface_hub", "math-verify", "snakemake")


PACKAGE = "batched_reasoning"
# When this process loaded the library, on the clock `finished_at` reads too. The process's
# creation time (psutil) is not that clock: Linux counts it in ticks since boot, and the boot
# time it adds is whole seconds, so it may lie up to a second before the wall clock; two jobs
# that ran one after the other could then seem to overlap.
LOADED_AT = time.time()


def imported_modules(path: str | Path) -> set[str]:
    """Package modules the Python file at `path` imports: `import batched_reasoning.x`,
    `from batched_reasoning(.x) import ...`, and inside the package `from .x import ...` and
    `from . import x`."""
    found = set()
    for node in ast.walk(ast.parse(Path(path).read_text())):
        if isinstance(node, ast.Import):
            dotted = [alias.name for alias in node.names if alias.name.startswith(PACKAGE + ".")]
        elif isinstance(node, ast.ImportFrom) and (node.level == 1 or node.module == PACKAGE or (
                node.module or "").startswith(PACKAGE + ".")):
            module = node.module if node.level == 0 else f"{PACKAGE}.{node.module or ''}"
            module = module.rstrip(".")
            # `from package import x`: x may be a module; `from package.x import y`: x is one
            dotted = ([f"{module}.{alias.name}" for alias in node.names] if module == PACKAGE
                      else [module])
        else:
            continue
        for name in dotted:
            module = name.split(".")[1]
            if (PACKAGE_DIR / f"{module}.py").is_file():
                found.add(module)
    return found


def module_closure(*modules: str) -> list[str]:
    """`modules` and every package module they import, transitively, sorted."""
    seen, todo = set(), list(modules)
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(imported_modules(PACKAGE_DIR / f"{module}.py"))
    return sorted(seen)


def parsed_code(path: str | Path) -> str:
    """The code of a Python file as the interpreter sees it: comments, layout and docstrings do
    not count, so editing them reruns nothing."""
    tree = ast.parse(Path(path).read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, annotate_fields=False, include_attributes=False)


def code_hash(*modules: str) -> str:
    """Hash of the parsed code behind `modules` and every package module they import (all
    modules when none are named).

    Workflow rules carry the hash of what their script imports as a param, so editing a
    module's code reruns exactly the jobs whose scripts import it, directly or not.
    """
    names = module_closure(*modules) if modules else sorted(p.stem for p in PACKAGE_DIR.glob("*.py"))
    digest = hashlib.sha256()
    for name in names:
        digest.update(name.encode() + b"\0" + parsed_code(PACKAGE_DIR / f"{name}.py").encode())
    return digest.hexdigest()[:16]


def script_code_hash(script: str | Path) -> str:
    """`code_hash` of the package modules a workflow script imports."""
    return code_hash(*sorted(imported_modules(script)))


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def run_info(params: dict, device: torch.device, stage: str) -> dict:
    """Provenance block stored with every metrics file; `started_at`/`finished_at` (Unix
    seconds, one clock: when the job's process loaded this library, this call) bracket the
    job's work."""
    return {
        "started_at": LOADED_AT,
        "finished_at": time.time(),
        "seed": params.get("seed"),
        "config": params,
        "code_hash": code_hash(stage),
        "packages": package_versions(),
        "device": device.type,
        "device_name": device_name(device),
        # the CPU class acted out (`cpu_class`) and the kernels PyTorch dispatched to
        "cpu_class": current_cpu_class(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "kernel_choices": choices_made(),  # measured on this machine (`calibration`)
        "torch_version": torch.__version__,
    }
