"""The rules' input functions, params and resources (`workflow/wiring.py`), on the default
config: what a job of each kind is given, from its wildcards alone."""

import copy
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from batched_reasoning.workflow.plan import Plan, PlanError
from batched_reasoning.workflow.wiring import Wiring

REPO = Path(__file__).resolve().parents[1]
DEFAULTS = yaml.safe_load((REPO / "config.yaml").read_text())


class Wildcards(SimpleNamespace):
    def get(self, name, default=None):
        return getattr(self, name, default)


def wiring(change=lambda config: None) -> Wiring:
    config = copy.deepcopy(DEFAULTS)
    change(config)
    return Wiring(Plan(config))


def test_a_student_reads_its_bases_tokenizer_and_its_own_weights():
    wire = wiring()
    student = Wildcards(model="toy-distilled-bs8-cpu", dataset="arith", seed="0")
    assert wire.tokenizer_input(student) == "results/tokenizers/toy"
    assert wire.model_input(student) == "results/seed0/distill/toy/arith/bs8/cpu/ws1/model"
    assert wire.model_input(Wildcards(model="toy", dataset="arith", seed="1")) == (
        "results/seed1/pretrain/toy/model")
    # a hub model's tokenizer is in its download, the same for every seed
    assert wire.tokenizer_input(Wildcards(model="qwen3-0.6b-base")) == (
        "resources/models/qwen3-0.6b-base")


def test_catalogue_names_match_whole_names_of_their_source_only():
    wire = wiring()
    toy = re.compile(wire.names_of("toy", "models"))
    assert toy.fullmatch("toy") and not toy.fullmatch("toy-distilled-bs8-cpu")
    assert not toy.fullmatch("qwen3-0.6b-base")
    assert re.compile(wire.names_of("local", "models")).fullmatch("") is None  # none: nothing


def test_a_partition_per_device_only_where_the_config_names_one():
    assert wiring().partition() == {}
    wire = wiring(lambda c: c["slurm_partition"].update(cuda="gpu"))
    pick = wire.partition()["slurm_partition"]
    assert pick(Wildcards(device="cuda")) == "gpu" and pick(Wildcards(device="cpu")) == ""


def test_a_probe_asks_for_the_budget_where_one_is_set():
    wire = wiring(lambda c: c["memory_budget_mb"].update(cpu=3000))
    probe = Wildcards(stage="evaluate", model="toy", dataset="arith", device="cpu", seed="0")
    assert wire.autotune_memory(probe, attempt=1) == 3000
    unset = wiring(lambda c: c["memory_budget_mb"].update(cpu=None))
    asked = unset.autotune_memory(probe, attempt=1)
    assert asked == unset.plan.generation_resources("evaluate", "toy", 64, "cpu", 1)["mem_mb"]


def test_a_training_timing_waits_for_its_probe_only_under_auto():
    job = Wildcards(stage="grpo", model="toy", dataset="arith", device="cpu", seed="0")
    assert wiring().probe_outputs(job) == []
    auto = wiring(lambda c: c["grpo"].update(batch_sizes=["auto"]))
    assert auto.probe_outputs(job) == ["results/autotune/seed0/grpo/toy/arith/cpu.json"]


def test_arith_traces_for_a_dataset_that_is_not_arith_is_refused_naming_the_keys():
    with pytest.raises(PlanError, match=r"distill\.datasets.*'math500'.*distill\.teacher\.source"):
        wiring(lambda c: c["distill"].update(datasets=["math500"]))


def test_a_probe_measures_its_stages_own_problems():
    wire = wiring()
    job = dict(model="toy", dataset="arith", device="cpu", seed="0")
    assert wire.autotune_input(Wildcards(stage="evaluate", **job)) == {
        "model": "results/seed0/pretrain/toy/model", "records": "resources/data/arith/test.jsonl"}
    assert wire.autotune_input(Wildcards(stage="grpo", **job))["records"] == (
        "resources/data/arith/train.jsonl")
    assert wire.autotune_input(Wildcards(stage="distill", **job))["records"] == (
        "resources/teacher/arith.json")
