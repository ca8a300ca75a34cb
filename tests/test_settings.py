"""A training stage's settings: one typed object, made from a rule's params, checked when made."""

import dataclasses

import pytest

from batched_reasoning.stages.distill import DistillSettings
from batched_reasoning.stages.grpo import GRPOSettings
from batched_reasoning.stages.pretrain import PretrainSettings

PRETRAIN = dict(steps=10, batch_size=8, lr=3e-3, warmup=5, weight_decay=0.01, worked_share=0.4,
                checkpoint_every=5, seed=0, device="cpu", threads=1)
GRPO = dict(strategy="batched", batch_size=4, device="cpu", dtype="float32", compile="off",
            steps=6, num_rollouts=4, problems_per_step=1, max_new_tokens=12, temperature=1.0,
            top_p=1.0, lr=1e-3, grad_clip=1.0, seed=0, checkpoint_every=2, eval_every=3,
            eval_problems=4, train_problems=None, skip_zero_advantage=True, prompt_style="base",
            threads=1)


def test_made_from_a_rules_params_its_other_keys_ignored_the_job_given_first():
    params = PRETRAIN | {"threads": 7, "checkpoints": "results/x/checkpoints", "code": "abc"}
    settings = PretrainSettings.from_params(params, threads=2)
    assert settings.as_dict() == PRETRAIN | {"threads": 2}


def test_a_missing_setting_is_named():
    params = {k: v for k, v in GRPO.items() if k not in ("top_p", "strategy")}
    with pytest.raises(KeyError, match="GRPOSettings: params lack top_p"):
        GRPOSettings.from_params(params, strategy="batched")
    with pytest.raises(TypeError, match="GRPOSettings has no setting bach_size"):
        GRPOSettings.from_params(GRPO, bach_size=4)


@pytest.mark.parametrize("name, value, expected", [
    ("batch_size", "4", "int"),      # a wildcard not converted
    ("batch_size", 4.0, "int"),
    ("batch_size", True, "int"),     # a bool is not a count
    ("skip_zero_advantage", 1, "bool"),
    ("lr", "1e-3", "float"),         # YAML 1.1 reads 1e-3 (no dot) as a string
    ("train_problems", 2.5, "int or None"),
    ("strategy", None, "str"),
])
def test_a_wrong_type_is_refused_naming_the_setting(name, value, expected):
    with pytest.raises(TypeError, match=rf"GRPOSettings\.{name} must be {expected}, got"):
        GRPOSettings(**GRPO | {name: value})


def test_numbers_that_fit_are_accepted():
    settings = GRPOSettings(**GRPO | {"lr": 1, "train_problems": 3})
    assert settings.lr == 1 and settings.train_problems == 3
    assert DistillSettings(
        prompt_style="base", batch_size=2, examples_per_step=4, device="cpu", dtype="float32",
        epochs=1, lr=1e-3, max_seq_len=512, validation_size=6, max_examples=None,
        use_think_tokens=True, sort_by_length=True, grad_clip=None, seed=3, log_every=10,
        checkpoint_every=5, threads=1).grad_clip is None


def test_a_stage_checks_its_own_rules_when_made():
    with pytest.raises(ValueError, match="num_rollouts must be >= 2"):
        GRPOSettings(**GRPO | {"num_rollouts": 1})


def test_settings_are_frozen_so_the_identity_cannot_drift():
    settings = PretrainSettings(**PRETRAIN)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.steps = 20

