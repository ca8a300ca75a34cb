"""The code hash follows imports through subpackages: a change reruns exactly the jobs whose
scripts import the changed module, directly or not, at any depth."""

import pytest

from batched_reasoning.core import provenance

# A package laid out in layers, as issue 29 cuts ours: the model knows no stage, stages use data.
FILES = {
    "__init__.py": "",
    "kernels.py": "PACK = 4\n",
    "model/__init__.py": "from .qwen3 import Qwen3\n",
    "model/qwen3.py": "from ..kernels import PACK\nfrom .attention import attend\nclass Qwen3: pass\n",
    "model/attention.py": "def attend(): return 1\n",
    "data/__init__.py": "",
    "data/prompts.py": "def format_prompt(p): return p\n",
    "stages/__init__.py": "",
    "stages/tokenize.py": "from ..data.prompts import format_prompt\n",
    "stages/evaluate.py": "from batched_reasoning.model.qwen3 import Qwen3\nfrom . import tokenize\n",
}


@pytest.fixture
def package(tmp_path, monkeypatch):
    root = tmp_path / "batched_reasoning"
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    monkeypatch.setattr(provenance, "PACKAGE_DIR", root.resolve())
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "tokenize.py").write_text("from batched_reasoning.stages.tokenize import x\n")
    (scripts / "evaluate.py").write_text("from batched_reasoning.stages import evaluate\n")
    return root, scripts


def test_imports_resolve_through_subpackages_at_any_depth(package):
    root, scripts = package
    assert provenance.module_closure("model.qwen3") == [
        "kernels", "model", "model.attention", "model.qwen3"]
    assert provenance.module_closure(*provenance.imported_modules(scripts / "evaluate.py")) == [
        "data", "data.prompts", "kernels", "model", "model.attention", "model.qwen3",
        "stages", "stages.evaluate", "stages.tokenize"]
    assert provenance.module_closure(*provenance.imported_modules(scripts / "tokenize.py")) == [
        "data", "data.prompts", "stages", "stages.tokenize"]


def test_a_change_in_the_model_reruns_evaluation_not_tokenization(package):
    root, scripts = package
    before = {s: provenance.script_code_hash(scripts / f"{s}.py") for s in ("tokenize", "evaluate")}
    (root / "model/attention.py").write_text("def attend(): return 2\n")
    after = {s: provenance.script_code_hash(scripts / f"{s}.py") for s in ("tokenize", "evaluate")}
    assert after["tokenize"] == before["tokenize"]
    assert after["evaluate"] != before["evaluate"]
    (root / "data/prompts.py").write_text("def format_prompt(p): return p + '!'\n")
    assert provenance.script_code_hash(scripts / "tokenize.py") != after["tokenize"]


def test_every_module_counts_in_the_whole_librarys_hash(package):
    root, _ = package
    assert "model.attention" in provenance.all_modules() and "model" in provenance.all_modules()
    before = provenance.code_hash()
    (root / "model/attention.py").write_text("def attend(): return 3\n")
    assert provenance.code_hash() != before


def test_an_import_for_type_hints_only_is_no_part_of_the_closure(package):
    root, _ = package
    (root / "model/attention.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..stages.evaluate import x\n"
        "else:\n    from ..data import prompts\ndef attend(): return 1\n")
    assert provenance.module_closure("model.attention") == [
        "data", "data.prompts", "model.attention"]


def test_our_tokenize_stage_imports_no_model_or_generation_code():
    """Editing the model or generation reruns evaluation, never tokenization (which only renders
    and pads prompts): checked on the real workflow scripts."""
    from pathlib import Path
    scripts = Path(__file__).resolve().parents[1] / "workflow" / "scripts"
    tokenize = provenance.module_closure(*provenance.imported_modules(scripts / "tokenize.py"))
    evaluate = provenance.module_closure(*provenance.imported_modules(scripts / "evaluate.py"))
    engine = {"model.qwen3", "model.kernels", "model.attention", "engine.kv_cache",
              "engine.generation", "model.checkpoint"}
    assert engine <= set(evaluate)
    assert not engine & set(tokenize), sorted(engine & set(tokenize))
