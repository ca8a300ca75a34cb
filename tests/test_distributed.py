"""Data-parallel training on CPU with gloo: real ranks started by torchrun's launcher.

Splitting a batch over ranks must not change the update: two ranks with b examples each give
the weights one rank gives with 2b. A killed multi-rank run must resume to the very weights of
an uninterrupted one, and its ranks must die with their launcher.
"""

import json
import signal
import subprocess
import sys
import time

import psutil
import pytest
import torch
from conftest import random_model
from safetensors.torch import load_file

from batched_reasoning import distributed
from batched_reasoning.arith import make_arith
from batched_reasoning.checkpoint import load_model, save_model
from batched_reasoning.distill import distill
from batched_reasoning.grpo import policy_update
from batched_reasoning.io import read_json
from batched_reasoning.prompts import TextTokenizer, format_prompt
from batched_reasoning.teacher import make_teacher_traces
from batched_reasoning.toy import training_text
from batched_reasoning.toy_tokenizer import train_toy_tokenizer

ARITH = make_arith(seed=0, n_train=60, n_test=2)["train"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A tiny random Qwen3 with a toy tokenizer, and teacher traces for it."""
    root = tmp_path_factory.mktemp("ddp")
    source = root / "source"
    source.mkdir()
    tokenizer = train_toy_tokenizer([training_text(r) for r in ARITH], 300)
    tokenizer.save(str(source / "tokenizer.json"))
    save_model(random_model(vocab_size=tokenizer.get_vocab_size(with_added_tokens=True)),
               root / "model", source=source)
    (root / "teacher.json").write_text(json.dumps(make_teacher_traces(ARITH)))
    return root


def distill_args(root, name, **overrides):
    """(positional, keyword) arguments of one distillation run into `root/name`."""
    out = root / name
    settings = dict(prompt_style="base", batch_size=4, examples_per_step=4, device="cpu",
                    dtype="float32", epochs=1,
                    lr=1e-3, max_seq_len=512, validation_size=6, max_examples=None,
                    use_think_tokens=True, sort_by_length=True, grad_clip=1.0, seed=3,
                    log_every=1000, checkpoint_every=1000, threads=1) | overrides
    positional = [str(root / "model"), str(root / "teacher.json"), str(out / "model"),
                  str(out / "checkpoints"), str(out / "log.csv"), str(out / "metrics.json"),
                  str(out / "curve.png")]
    return positional, settings | {"params": dict(settings), "labels": {"model": "tiny"}}


def weights(directory):
    return load_file(directory / "model" / "model.safetensors")


def max_difference(a, b):
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


def test_two_ranks_with_b_examples_update_like_one_rank_with_2b(setup):
    positional, keywords = distill_args(setup, "one", max_examples=4)  # one step of 4
    one = distributed.launch(distill, 1, *positional, **keywords)
    positional, keywords = distill_args(setup, "two", max_examples=4)
    two = distributed.launch(distill, 2, *positional, **keywords)
    assert (one["world_size"], two["world_size"]) == (1, 2)
    assert one["steps"] == two["steps"] == 1
    initial = load_file(setup / "model" / "model.safetensors")
    assert max_difference(weights(setup / "one"), initial) > 1e-4  # the step did change weights
    assert max_difference(weights(setup / "one"), weights(setup / "two")) < 1e-6
    assert two["train_tokens"] == one["train_tokens"]


def grpo_update(model_dir, out_dir, prompts, completions, advantages, pad_token_id):
    """One policy update on fixed rollouts, each rank on its share; rank 0 saves the result."""
    torch.set_num_threads(1)
    model = load_model(model_dir)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    mine = distributed.shard(range(len(completions)))
    loss, grad_norm = policy_update(
        distributed.wrap(model), optimizer, [prompts[i] for i in mine],
        [completions[i] for i in mine], torch.tensor([advantages[i] for i in mine]),
        pad_token_id, 1.0, model.device, len(completions))
    if distributed.is_main():
        save_model(model, out_dir, source=model_dir)
    return loss, grad_norm


def test_grpo_update_on_two_ranks_equals_one_rank(setup):
    tokenizer = TextTokenizer.from_model_dir(setup / "model")
    prompts = [tokenizer.encode(format_prompt(r["problem"], "base")) for r in ARITH[:2]] * 3
    completions = [tokenizer.encode(text) + [tokenizer.eos_token_id] for text in
                   ("12", "The answer is 7", "3 + 4 = 7", "no idea", "\\boxed{5}", "5")]
    advantages = [1.2, -0.4, 0.8, -1.0, 0.3, -0.9]
    args = (str(setup / "model"), prompts, completions, advantages, tokenizer.pad_token_id)
    loss_one, norm_one = distributed.launch(grpo_update, 1, args[0], str(setup / "grpo-one"), *args[1:])
    loss_two, norm_two = distributed.launch(grpo_update, 2, args[0], str(setup / "grpo-two"), *args[1:])
    assert loss_two == pytest.approx(loss_one, rel=1e-5)  # float32 sums in other layouts
    assert norm_two == pytest.approx(norm_one, rel=1e-5)
    initial = load_file(setup / "model" / "model.safetensors")
    one = load_file(setup / "grpo-one" / "model.safetensors")
    assert max_difference(one, initial) > 1e-4
    assert max_difference(one, load_file(setup / "grpo-two" / "model.safetensors")) < 1e-6


def start_distill(root, name, world_size, **overrides):
    """A distillation run in its own process, as the workflow's job runs it."""
    positional, keywords = distill_args(root, name, **overrides)
    code = ("import json, sys; from batched_reasoning.distributed import launch; "
            "from batched_reasoning.distill import distill; a = json.loads(sys.argv[1]); "
            "launch(distill, a['world_size'], *a['positional'], **a['keywords'])")
    payload = json.dumps({"world_size": world_size, "positional": positional, "keywords": keywords})
    return subprocess.Popen([sys.executable, "-c", code, payload])


def test_killed_two_rank_run_resumes_to_the_same_weights(setup):
    run = dict(epochs=8, checkpoint_every=5, log_every=10)
    assert start_distill(setup, "straight", 2, **run).wait(timeout=600) == 0

    launcher = start_distill(setup, "killed", 2, **run)
    checkpoints = setup / "killed" / "checkpoints"
    deadline = time.time() + 300
    while not list(checkpoints.glob("step-*/trainer_state.pt")):
        assert launcher.poll() is None and time.time() < deadline, "no checkpoint before the end"
        time.sleep(0.02)
    ranks = psutil.Process(launcher.pid).children(recursive=True)  # torchrun and its 2 ranks
    assert len(ranks) >= 3
    launcher.send_signal(signal.SIGKILL)
    launcher.wait()
    gone, alive = psutil.wait_procs(ranks, timeout=30)
    assert not alive, "ranks outlived their killed launcher"
    assert not (setup / "killed" / "metrics.json").exists()

    assert start_distill(setup, "killed", 2, **run).wait(timeout=600) == 0
    metrics = read_json(setup / "killed" / "metrics.json")
    assert metrics["world_size"] == 2 and metrics["resumed_from_step"] > 0
    straight, resumed = weights(setup / "straight"), weights(setup / "killed")
    assert all(torch.equal(straight[k], resumed[k]) for k in straight)
