"""GRPO: the book's loss and advantages, one batched log-prob pass, skipping, determinism,
resume."""

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from conftest import TINY, random_model, training_files
from safetensors.torch import load_file

from batched_reasoning.stages import grpo as grpo_module
from batched_reasoning.world.arith import make_arith
from batched_reasoning.model.checkpoint import load_model, save_model
from batched_reasoning.stages.grpo import (
    completion_logprobs,
    group_advantages,
    policy_loss,
    scored_completion,
    GRPOSettings,
    StepContext,
    grpo_step,
    train_grpo,
)
from batched_reasoning.core.io import read_jsonl, write_jsonl
from batched_reasoning.engine.sampling import TopP
from batched_reasoning.training.settings import TrainingFiles
from batched_reasoning.data.prompts import TextTokenizer, format_prompt
from batched_reasoning.workflow.training_tables import grpo_table, plot_grpo
from batched_reasoning.model.config import Qwen3Config, new_model_config
from batched_reasoning.world.toy_tokenizer import END_TOKEN, train_toy_tokenizer, training_text

TIMING = ["tokens_per_sec", "gen_seconds", "update_seconds", "step_seconds", "peak_mem_mb",
          "eval_seconds"]
CONFIG = dict(
    strategy="batched", batch_size=4, device="cpu", dtype="float32", compile="off", steps=6,
    num_rollouts=4, problems_per_step=1,
    max_new_tokens=12, temperature=1.0, top_p=1.0, lr=1e-3, grad_clip=1.0, seed=0,
    checkpoint_every=2, eval_every=3, eval_problems=4, train_problems=None, skip_zero_advantage=True,
    prompt_style="base", threads=1,
)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A tiny random Qwen3 with a toy tokenizer, and problems whose answer is declared to be 0.

    The model's "0" logit is boosted, so some rollouts end on a number 0 and others do not:
    groups get mixed rewards and updates happen.
    """
    root = tmp_path_factory.mktemp("grpo")
    records = make_arith(seed=0, n_train=12, n_test=4)
    tokenizer = train_toy_tokenizer([training_text(r) for r in records["train"]], vocab_size=300)
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    source = root / "source"
    source.mkdir()
    tokenizer.save(str(source / "tokenizer.json"))
    config = new_model_config(Qwen3Config(**(TINY | {"vocab_size": vocab})),
                              tokenizer.token_to_id(END_TOKEN))
    (source / "config.json").write_text(json.dumps(config))
    model = random_model(vocab_size=vocab)
    with torch.no_grad():
        model.lm_head.weight[tokenizer.token_to_id("0")] *= 3
    save_model(model, root / "model", source=source)
    for split in ("train", "test"):
        write_jsonl([r | {"answer": "0"} for r in records[split]], root / f"{split}.jsonl")
    write_jsonl([r | {"answer": "-987654321"} for r in records["train"]], root / "unsolvable.jsonl")
    return root


def run(setup, name, train="train.jsonl", **overrides):
    """One training run into `setup/name`; returns its metrics."""
    config = CONFIG | overrides
    out = setup / name
    return train_grpo(setup / "model", setup / train, setup / "test.jsonl",
                      TrainingFiles(**training_files(out)),
                      GRPOSettings(**config), params=config,
                      labels={"model": "tiny", "dataset": "zeros"})


def weights(directory):
    return load_file(directory / "model.safetensors")


def assert_same_weights(a, b):
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for key in wa:
        assert torch.equal(wa[key], wb[key]), key


def without_timings(log_csv):
    return pd.read_csv(log_csv).drop(columns=TIMING)


@pytest.fixture(scope="module")
def straight(setup):
    return run(setup, "straight")


@pytest.fixture(scope="module")
def model_and_prompt(setup):
    model = load_model(setup / "model")
    tokenizer = TextTokenizer.from_model_dir(setup / "model")
    prompt = tokenizer.encode(format_prompt("What is 2 + 2?", "base"))
    completions = [[5, 17, 42, 9, 88], [tokenizer.eos_token_id], list(range(30, 39))]
    return model, prompt, completions, tokenizer.pad_token_id


def test_advantages_use_the_sample_std_like_the_book():
    rewards = torch.tensor([1.0, 0.0, 0.0])
    std = math.sqrt(((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2)  # n - 1 in the denominator
    expected = [(2 / 3) / (std + 1e-4), (-1 / 3) / (std + 1e-4), (-1 / 3) / (std + 1e-4)]
    assert group_advantages(rewards).tolist() == pytest.approx(expected, rel=1e-6)
    assert group_advantages(torch.ones(4)).tolist() == [0.0] * 4


def test_end_token_is_scored_only_when_the_rollout_stopped():
    assert scored_completion([4, 5], stop_token=2) == [4, 5, 2]
    assert scored_completion([4, 5], stop_token=7) == [4, 5, 7]  # a second end token
    assert scored_completion([4, 5, 6], stop_token=None) == [4, 5, 6]


def test_loss_matches_hand_computation(model_and_prompt):
    model, prompt, completions, pad = model_and_prompt
    rewards = torch.tensor([1.0, 0.0, 0.0])
    hand_logprobs = []
    for completion in completions:
        ids = torch.tensor([prompt + completion])
        logprobs = F.log_softmax(model(ids)[0].float(), dim=-1)
        hand_logprobs.append(sum(
            logprobs[len(prompt) + i - 1, token].item() for i, token in enumerate(completion)))
    std = math.sqrt(1 / 3)
    hand_advantages = [(2 / 3) / (std + 1e-4), (-1 / 3) / (std + 1e-4), (-1 / 3) / (std + 1e-4)]
    hand_loss = -sum(a * lp for a, lp in zip(hand_advantages, hand_logprobs)) / 3
    logprobs = completion_logprobs(model, [prompt] * 3, completions, pad, model.device)
    assert logprobs.tolist() == pytest.approx(hand_logprobs, abs=1e-4)
    loss = policy_loss(logprobs, group_advantages(rewards))
    assert loss.item() == pytest.approx(hand_loss, abs=1e-4)


def test_batched_logprobs_equal_per_rollout_passes(model_and_prompt):
    model, prompt, completions, pad = model_and_prompt
    prompts = [prompt, prompt[2:], prompt[:-3]]  # rollouts of different problems share a pass
    batched = completion_logprobs(model, prompts, completions, pad, model.device)
    for row, completion in enumerate(completions):
        single = completion_logprobs(model, [prompts[row]], [completion], pad, model.device)
        assert batched[row].item() == pytest.approx(single.item(), abs=1e-5)


def test_every_generation_of_a_run_decodes_as_its_compile_setting_says(setup):
    """`compile` reaches the held-out evaluation and the rollouts: an unknown mode stops each
    at its first generation (`engine.compiled` checks it), where one left out would not."""
    with pytest.raises(ValueError, match="compile must be one of") as raised:
        run(setup, "unknown_compile", compile="yes", steps=1)
    assert "eval_correct" in {entry.name for entry in raised.traceback}  # before any rollout
    settings = GRPOSettings(**CONFIG | {"compile": "yes"})
    tokenizer = TextTokenizer.from_model_dir(setup / "model")
    context = StepContext(settings, tokenizer, read_jsonl(setup / "train.jsonl"),
                          TopP(1.0, 1.0, 0), torch.device("cpu"))
    model = load_model(setup / "model")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with pytest.raises(ValueError, match="compile must be one of"):
        grpo_step(model, optimizer, 0, context)


def test_zero_advantage_groups_skip_the_update(setup):
    metrics = run(setup, "skip", train="unsolvable.jsonl", steps=2)
    assert metrics["skipped_updates"] == 2
    assert pd.read_csv(setup / "skip/log.csv")["skipped"].tolist()[1:] == [True, True]
    assert_same_weights(setup / "skip/model", setup / "model")
    # without skipping, AdamW's weight decay still moves the weights on a zero loss
    run(setup, "no_skip", train="unsolvable.jsonl", steps=2, skip_zero_advantage=False)
    assert not torch.equal(weights(setup / "no_skip/model")["model.norm.weight"],
                           weights(setup / "model")["model.norm.weight"])


def test_run_is_deterministic_and_learns_something(setup, straight):
    log = pd.read_csv(setup / "straight/log.csv")
    assert log["step"].tolist() == list(range(CONFIG["steps"] + 1))
    assert straight["skipped_updates"] < CONFIG["steps"], "test needs steps with mixed rewards"
    assert log["eval_acc"].notna().tolist() == [True, False, False, True, False, False, True]
    run(setup, "again")
    pd.testing.assert_frame_equal(without_timings(setup / "again/log.csv"),
                                  without_timings(setup / "straight/log.csv"))
    assert_same_weights(setup / "again/model", setup / "straight/model")
    assert not torch.equal(weights(setup / "straight/model")["model.norm.weight"],
                           weights(setup / "model")["model.norm.weight"])


def test_rollouts_do_not_depend_on_strategy_or_batch_size(setup, straight):
    """The same rollout tokens, step by step (their digests), so the same training."""
    run(setup, "sequential", strategy="sequential", batch_size=1)
    run(setup, "continuous", strategy="continuous", batch_size=3)
    logs = [pd.read_csv(setup / name / "log.csv").iloc[1:]
            for name in ("straight", "sequential", "continuous")]
    assert logs[0]["rollouts_digest"].nunique() == CONFIG["steps"]  # each step its own rollouts
    for log in logs[1:]:
        assert log["rollouts_digest"].tolist() == logs[0]["rollouts_digest"].tolist()
    assert_same_weights(setup / "sequential/model", setup / "straight/model")


def test_killed_run_resumes_to_the_same_result(setup, straight):
    """SIGKILL a run after its first checkpoint; the rerun must continue from that checkpoint."""
    out = setup / "killed"
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]); from test_grpo import run; "
        "from pathlib import Path; run(Path(sys.argv[2]), 'killed')"
    )
    child = subprocess.Popen([sys.executable, "-c", script, str(Path(__file__).parent), str(setup)])
    try:
        while not list((out / "checkpoints").glob("step-*")):
            assert child.poll() is None, "training ended before it could be killed"
            time.sleep(0.005)
    finally:
        child.kill()
        child.wait()
    assert not (out / "metrics.json").exists(), "the run finished before the kill"
    metrics = run(setup, "killed")
    assert 0 < metrics["resumed_from_step"] < CONFIG["steps"]
    pd.testing.assert_frame_equal(without_timings(out / "log.csv"),
                                  without_timings(setup / "straight/log.csv"))
    assert_same_weights(out / "model", setup / "straight/model")


def test_a_checkpoint_is_resumed_only_by_the_same_run(setup, monkeypatch):
    def interrupted(**overrides):
        """A run that dies after training, leaving its step-4 checkpoint behind."""
        def dies(*args, **kwargs):
            raise KeyboardInterrupt

        with monkeypatch.context() as patch:
            patch.setattr(grpo_module, "save_model", dies)
            with pytest.raises(KeyboardInterrupt):
                run(setup, "rerun", **overrides)
        assert [p.name for p in (setup / "rerun/checkpoints").glob("step-*")] == ["step-000004"]

    interrupted()
    assert run(setup, "rerun")["resumed_from_step"] == 4
    assert not (setup / "rerun/checkpoints").exists()  # a finished run leaves no checkpoint
    interrupted()
    assert run(setup, "rerun", lr=1e-4)["resumed_from_step"] == 0  # other settings
    interrupted()
    (setup / "test.jsonl").touch()  # the same data, only newer
    assert run(setup, "rerun")["resumed_from_step"] == 4
    interrupted()
    records = (setup / "test.jsonl").read_text()
    (setup / "test.jsonl").write_text(records.replace('"answer": "0"', '"answer": "00"', 1))
    try:
        assert run(setup, "rerun")["resumed_from_step"] == 0  # other data
    finally:
        (setup / "test.jsonl").write_text(records)


def test_table_and_plot(setup, straight, tmp_path):
    run(setup, "sequential", strategy="sequential", batch_size=1)
    names = ["straight", "sequential"]
    metrics = [setup / n / "metrics.json" for n in names]
    table = grpo_table(metrics)
    assert table["strategy"].tolist() == ["batched", "sequential"]
    batched, sequential = (json.loads(path.read_text()) for path in metrics)
    assert table.loc[0, "speedup_vs_sequential"] == pytest.approx(
        sequential["train_seconds"] / batched["train_seconds"])
    assert table["eval_acc_before"].between(0, 1).all()
    assert (table["gen_s_per_step"] > 0).all()
    plot_grpo(metrics, [setup / n / "log.csv" for n in names], tmp_path / "grpo.png", "GRPO")
    assert (tmp_path / "grpo.png").stat().st_size > 0
    assert (setup / "straight/curve.png").stat().st_size > 0
