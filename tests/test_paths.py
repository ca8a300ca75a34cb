"""Where runs write (`workflow/paths.py`): each kind's folder is one pattern, which the rules
use with Snakemake wildcards and the plan fills for one run. The literal paths are the layout
users and docs rely on."""

import re

import pytest

from batched_reasoning.workflow.paths import (CurvePoint, GenerationRun, Pretraining, Probe,
                                              TimedTraining, ToyTokenizer, TrainingRun)

RUNS = [
    (GenerationRun(0, "toy", "arith", "batched", 4, "cpu"), ("evaluate", "metrics.json"),
     "results/seed0/evaluate/toy/arith/batched/bs4/cpu/metrics.json"),
    (TrainingRun(1, "toy", "arith", 8, "cpu", 2, "batched_stop", "r"), ("grpo", "log.csv"),
     "r/seed1/grpo/toy/arith/batched_stop/bs8/cpu/ws2/log.csv"),
    (TrainingRun(0, "toy", "arith", 8, "cpu", 1), ("distill", "model"),
     "results/seed0/distill/toy/arith/bs8/cpu/ws1/model"),
    (CurvePoint(0, "evaluate", "m", "d", 16, "cuda", 2), ("records.jsonl",),
     "results/seed0/curve/evaluate/m/d/bs16/cuda/t2/records.jsonl"),
    (TimedTraining(2, "grpo", "m", "d", "cpu", 1), ("metrics.json",),
     "results/seed2/timed_training/grpo/m/d/cpu/t1/metrics.json"),
    (Probe(0, "self_consistency", "m", "d", "mps"), (),
     "results/autotune/seed0/self_consistency/m/d/mps.json"),
    (Pretraining(3, "toy"), ("model",), "results/seed3/pretrain/toy/model"),
    (ToyTokenizer("toy", "other"), (), "other/tokenizers/toy"),
]


@pytest.mark.parametrize("run, args, expected", RUNS)
def test_a_run_writes_where_its_pattern_says(run, args, expected):
    assert run.path(*args) == expected
    # the rule's pattern, its wildcards filled from the path, is the same path
    stage = {"stage": args[0]} if isinstance(run, (GenerationRun, TrainingRun)) else {}
    name = args[-1] if args and not (stage and len(args) == 1) else ""
    pattern = type(run).pattern(name, run.root, **stage)
    regex = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(pattern))
    match = re.fullmatch(regex, expected)
    assert match, (pattern, expected)
    fields = {k: v for k, v in vars(run).items() if k != "root" and v is not None}
    assert {k: str(v) for k, v in fields.items() if k in match.groupdict()} == match.groupdict()


def test_a_pattern_keeps_the_fields_a_rule_leaves_open_as_wildcards():
    assert GenerationRun.pattern("records.jsonl", "R", stage="vote") == (
        "R/seed{seed}/vote/{model}/{dataset}/{strategy}/bs{batch_size}/{device}/records.jsonl")
    assert TrainingRun.pattern(root="R", stage="distill") == (
        "R/seed{seed}/distill/{model}/{dataset}/bs{batch_size}/{device}/ws{world_size}")
    assert Probe.pattern(root="R") == "R/autotune/seed{seed}/{stage}/{model}/{dataset}/{device}.json"
