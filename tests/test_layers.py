"""The library's layers: a module imports only from its own layer and those below, so the
model knows no cache implementation, engine or stage, and a stage no workflow code."""

import pytest

from batched_reasoning.core import provenance

LAYERS = [["core"], ["model", "data"], ["engine", "world"], ["training"], ["stages"],
          ["workflow", "bench"], ["gpu_check"]]
RANK = {package: rank for rank, packages in enumerate(LAYERS) for package in packages}


def layered_modules() -> list[str]:
    return [name for name in provenance.all_modules() if "." in name]


def test_every_module_sits_in_a_layer():
    top_level = {name for name in provenance.all_modules() if "." not in name}
    assert top_level - set(RANK) == {"__init__"}


@pytest.mark.parametrize("module", layered_modules())
def test_imports_only_go_down(module):
    rank = RANK[module.split(".")[0]]
    above = sorted(imported for imported in provenance.imported_modules(provenance.module_file(module))
                   if RANK[imported.split(".")[0]] > rank)
    assert not above, f"{module} (layer {rank}) imports {above} from above"
