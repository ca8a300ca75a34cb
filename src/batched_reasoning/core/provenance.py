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

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # this file is core/provenance.py
PACKAGES = ("torch", "safetensors", "tokenizers", "huggingface_hub", "math-verify", "snakemake")


PACKAGE = "batched_reasoning"
# When this process loaded the library, on the clock `finished_at` reads too. The process's
# creation time (psutil) is not that clock: Linux counts it in ticks since boot, and the boot
# time it adds is whole seconds, so it may lie up to a second before the wall clock; two jobs
# that ran one after the other could then seem to overlap.
LOADED_AT = time.time()


def module_file(name: str) -> Path | None:
    """The file of package module `name`, dotted below the package ("generation",
    "model.qwen3"; a subpackage is its `__init__.py`), or None if the package has no such
    module."""
    base = PACKAGE_DIR.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def package_of(path: str | Path) -> list[str]:
    """The dotted package (as parts below ours) a file inside the package belongs to; [] for a
    file outside it (a workflow script), whose relative imports do not exist."""
    path = Path(path).resolve()
    if PACKAGE_DIR not in path.parents:
        return []
    return list(path.parent.relative_to(PACKAGE_DIR).parts)


def runtime_nodes(tree: ast.AST):
    """`ast.walk`, less the bodies of `if TYPE_CHECKING:`: an import made only for type hints
    runs no code, so it is no part of what a job computes."""
    pending = [tree]
    while pending:
        node = pending.pop()
        yield node
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            pending.extend(node.orelse)
        else:
            pending.extend(ast.iter_child_nodes(node))


def imported_modules(path: str | Path) -> set[str]:
    """Package modules the Python file at `path` imports, dotted below the package:
    `import batched_reasoning.x(.y)`, `from batched_reasoning(.x) import ...`, and inside the
    package relative imports at any depth (`from .x import ...`, `from ..x import y`,
    `from . import x`). Importing `a.b` also runs subpackage `a`'s `__init__.py`."""
    here = package_of(path)
    found = set()
    for node in runtime_nodes(ast.parse(Path(path).read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name.split(".")[1:] for alias in node.names
                     if alias.name.startswith(PACKAGE + ".")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                if node.level - 1 > len(here):  # above the package: not ours
                    continue
                parts = here[:len(here) - (node.level - 1)] + (node.module or "").split(".")
            elif node.module == PACKAGE or (node.module or "").startswith(PACKAGE + "."):
                parts = node.module.split(".")[1:]
            else:
                continue
            parts = [p for p in parts if p]
            # `from x import y`: y may be a module of package x, or a name x defines
            names = [parts + [alias.name] if module_file(".".join(parts + [alias.name]))
                     else parts for alias in node.names]
        else:
            continue
        for parts in names:
            for depth in range(1, len(parts) + 1):  # the subpackages on the way run too
                name = ".".join(parts[:depth])
                if module_file(name):
                    found.add(name)
    return found


def module_closure(*modules: str) -> list[str]:
    """`modules` and every package module they import, transitively, sorted."""
    seen, todo = set(), list(modules)
    while todo:
        module = todo.pop()
        if module not in seen:
            if module_file(module) is None:
                raise ValueError(f"{PACKAGE} has no module {module!r}")
            seen.add(module)
            todo.extend(imported_modules(module_file(module)))
    return sorted(seen)


def all_modules() -> list[str]:
    """Every module of the package, dotted below it (the package's own `__init__` as itself)."""
    names = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE_DIR).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        names.append(".".join(parts))
    return sorted(names)


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
    """Hash of the parsed code behind `modules` (dotted below the package, or a module's own
    `__name__`) and every package module they import (all modules when none are named).

    Workflow rules carry the hash of what their script imports as a param, so editing a
    module's code reruns exactly the jobs whose scripts import it, directly or not.
    """
    modules = [name.removeprefix(PACKAGE + ".") for name in modules]
    names = module_closure(*modules) if modules else all_modules()
    digest = hashlib.sha256()
    for name in names:
        digest.update(name.encode() + b"\0" + parsed_code(module_file(name)).encode())
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
    """Provenance block stored with every metrics file; `stage` is the stage module's
    `__name__` (its code hash is recorded); `started_at`/`finished_at` (Unix seconds, one clock:
    when the job's process loaded this library, this call) bracket the job's work."""
    return {
        "started_at": LOADED_AT,
        "finished_at": time.time(),
        "seed": params.get("seed"),
        "config": params,
        "code_hash": code_hash(stage),
        "packages": package_versions(),
        "device": device.type,
        "device_name": device_name(device),
        "threads": torch.get_num_threads(),  # timings compare only at equal thread counts
        # the CPU class acted out (`cpu_class`) and the kernels PyTorch dispatched to
        "cpu_class": current_cpu_class(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "kernel_choices": choices_made(),  # measured on this machine (`calibration`)
        "torch_version": torch.__version__,
    }
