"""Data-parallel training on CPU with gloo: real ranks started by torchrun's launcher.

Splitting a step over ranks must not change the update. The shares here are uneven (5 examples
or 7 rollouts on 2 ranks): there plain DDP averaging of each rank's mean is wrong, and only the
`share x world size` scaling makes it the mean over the whole step. Comparisons run in float64,
where the split changes nothing but the order of sums (~1e-15 relative), so the tolerances below
hold on any CPU; each test also runs the per-rank-mean mistake and shows that it fails them.
"""

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch
from conftest import needs_cuda, random_model, training_files
from safetensors.torch import load_file

from batched_reasoning.stages import distill as distill_module
from batched_reasoning.training import distributed
from batched_reasoning.world.arith import make_arith
from batched_reasoning.model.checkpoint import load_model, save_model
from batched_reasoning.stages.distill import DistillSettings, build_example, distill, train_step
from batched_reasoning.stages.grpo import GRPOSettings, policy_update, train_grpo
from batched_reasoning.training.settings import TrainingFiles
from batched_reasoning.core.io import read_json, write_jsonl
from batched_reasoning.data.prompts import TextTokenizer, format_prompt
from batched_reasoning.world.teacher import make_teacher_traces
from batched_reasoning.world.toy_tokenizer import train_toy_tokenizer, training_text

DATA = make_arith(seed=0, n_train=60, n_test=6)
ARITH = DATA["train"]
EXACT = 1e-12  # float64: a different order of sums, relative to the largest value compared
# After AdamW steps, relative to the size of the update: Adam divides each gradient by its
# running scale, which blows ulp-level differences up where that scale is small (seen: 2e-12).
EXACT_AFTER_ADAM = 1e-9
WRONG = 1e-3  # the per-rank-mean mistake moves the result by far more than this


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A tiny random Qwen3 with a toy tokenizer, teacher traces, and GRPO problems whose answer
    is declared to be 0: the model's "0" is boosted, so some rollouts end on a 0 and others do
    not, and groups get mixed rewards."""
    root = tmp_path_factory.mktemp("ddp")
    source = root / "source"
    source.mkdir()
    tokenizer = train_toy_tokenizer([training_text(r) for r in ARITH], 300)
    tokenizer.save(str(source / "tokenizer.json"))
    model = random_model(vocab_size=tokenizer.get_vocab_size(with_added_tokens=True))
    with torch.no_grad():
        model.lm_head.weight[tokenizer.token_to_id("0")] *= 3
    save_model(model, root / "model", source=source)
    (root / "teacher.json").write_text(json.dumps(make_teacher_traces(ARITH)))
    for split in ("train", "test"):
        write_jsonl([r | {"answer": "0"} for r in DATA[split]], root / f"{split}.jsonl")
    return root


def flat_gradients(model) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def relative_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max()).item()


# --- gradients of one step ----------------------------------------------------------------

def distill_gradients(model_dir, per_rank_mean: bool) -> torch.Tensor:
    """Each rank's gradient after one distillation step of 5 examples run 2 at a time."""
    torch.set_num_threads(1)
    model = load_model(model_dir, dtype="float64")
    tokenizer = TextTokenizer.from_model_dir(model_dir)
    step = [build_example(r, tokenizer, "base", True) for r in make_teacher_traces(ARITH[:5])]
    mine = distributed.shard(step)
    step_examples = len(mine) if per_rank_mean else len(step)  # the mistake: each rank's mean
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # leaves the gradients to read
    train_step(model, optimizer, mine, step_examples, 2,
               tokenizer.pad_token_id, None, "cpu")
    return flat_gradients(model)


@pytest.mark.slow
def test_distillation_gradient_on_uneven_shares_is_the_whole_steps(setup):
    model = str(setup / "model")
    one = distributed.launch(distill_gradients, 1, model, False)
    two = distributed.launch(distill_gradients, 2, model, False)
    assert one.abs().max() > 0
    assert relative_difference(two, one) < EXACT
    assert relative_difference(distributed.launch(distill_gradients, 2, model, True), one) > WRONG


def gloo_threads_after_a_step_and_destroy() -> list[str]:
    """A rank's gloo threads left after a gradient average and `destroy_process_group` (the
    launcher leaves a group the call destroyed alone)."""
    model = torch.nn.Linear(4, 2, dtype=torch.float64)
    model(torch.ones(3, 4, dtype=torch.float64)).sum().backward()
    distributed.average_gradients(model)
    assert torch.equal(model.weight.grad, torch.full((2, 4), 3.0, dtype=torch.float64))
    torch.distributed.destroy_process_group()
    names = [(Path("/proc/self/task") / task / "comm").read_text().strip()
             for task in os.listdir("/proc/self/task")]
    return [name for name in names if "gloo" in name]


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="lists threads from Linux's /proc")
def test_ranks_leave_no_gloo_threads_running_at_exit():
    """Threads still running as the interpreter exits are torn down in C++ static destruction,
    which aborted a rank now and then ("terminate called without an active exception"). DDP
    kept them alive past destroy_process_group; the plain gradient average does not."""
    assert distributed.launch(gloo_threads_after_a_step_and_destroy, 2) == []


def rollouts(model_dir):
    tokenizer = TextTokenizer.from_model_dir(model_dir)
    prompts = [tokenizer.encode(format_prompt(r["problem"], "base")) for r in ARITH[:7]]
    completions = [tokenizer.encode(text) + [tokenizer.eos_token_id] for text in
                   ("12", "The answer is 7", "3 + 4 = 7", "no idea", "\\boxed{5}", "5", "4+4=8")]
    advantages = [1.2, -0.4, 0.8, -1.0, 0.3, -0.9, 0.0]
    return tokenizer, prompts, completions, advantages


def grpo_gradients(model_dir, per_rank_mean: bool) -> tuple[torch.Tensor, float]:
    """Each rank's gradient and the update's loss for one policy update on 7 fixed rollouts."""
    torch.set_num_threads(1)
    tokenizer, prompts, completions, advantages = rollouts(model_dir)
    model = load_model(model_dir, dtype="float64")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    mine = distributed.shard(range(len(completions)))
    step_rollouts = len(mine) if per_rank_mean else len(completions)
    loss, _ = policy_update(
        model, optimizer, [prompts[i] for i in mine],
        [completions[i] for i in mine], torch.tensor([advantages[i] for i in mine]),
        tokenizer.pad_token_id, math.inf, model.device, step_rollouts)
    return flat_gradients(model), loss


@pytest.mark.slow
def test_grpo_gradient_on_uneven_shares_is_the_whole_steps(setup):
    model = str(setup / "model")
    one, loss_one = distributed.launch(grpo_gradients, 1, model, False)
    two, loss_two = distributed.launch(grpo_gradients, 2, model, False)
    assert one.abs().max() > 0
    assert relative_difference(two, one) < EXACT
    assert loss_two == pytest.approx(loss_one, rel=EXACT)
    wrong, _ = distributed.launch(grpo_gradients, 2, model, True)
    assert relative_difference(wrong, one) > WRONG


# --- weights after several steps ----------------------------------------------------------

def distill_spec(root, name, **overrides) -> dict:
    """One distillation run into `root/name`, in JSON (to hand to another process)."""
    settings = dict(prompt_style="base", batch_size=2, examples_per_step=5, device="cpu",
                    dtype="float32", epochs=1,
                    lr=1e-3, max_seq_len=512, validation_size=6, max_examples=None,
                    use_think_tokens=True, sort_by_length=True, grad_clip=1.0, seed=3,
                    log_every=1000, checkpoint_every=1000, threads=1) | overrides
    return {"model": str(root / "model"), "teacher": str(root / "teacher.json"),
            "files": training_files(root / name), "settings": settings, "params": dict(settings),
            "labels": {"model": "tiny"}}


def distill_args(root, name, **overrides) -> list:
    """The arguments of `distill` for one run into `root/name`."""
    spec = distill_spec(root, name, **overrides)
    return [spec["model"], spec["teacher"], TrainingFiles(**spec["files"]),
            DistillSettings(**spec["settings"]), spec["params"], spec["labels"]]


def distill_with(per_rank_mean: bool, *args, **kwargs):
    """The distillation stage, or the same with the per-rank-mean mistake in its steps."""
    if per_rank_mean:
        real = distill_module.train_step

        def each_rank_its_own_mean(model, optimizer, examples, step_examples, *rest):
            return real(model, optimizer, examples, max(1, len(examples)), *rest)

        distill_module.train_step = each_rank_its_own_mean
    return distill(*args, **kwargs)


def weights(directory):
    return load_file(directory / "model" / "model.safetensors")


def flat(state: dict) -> torch.Tensor:
    return torch.cat([state[k].flatten() for k in sorted(state)])


@pytest.mark.slow
def test_weights_after_several_unclipped_steps_match_one_rank(setup):
    """Three AdamW steps of 5 examples (3 + 2 per rank), no clipping, float64."""
    runs = {}
    for name, world_size, mistake in (("one", 1, False), ("two", 2, False), ("wrong", 2, True)):
        args = distill_args(setup, name, max_examples=15, dtype="float64",
                                            grad_clip=None)
        metrics = distributed.launch(distill_with, world_size, mistake, *args)
        assert metrics["steps"] == 3 and metrics["world_size"] == world_size
        runs[name] = flat(weights(setup / name))
    update = runs["one"] - flat(load_file(setup / "model" / "model.safetensors")).double()
    assert update.abs().max() > 1e-4  # the steps did move the weights
    assert ((runs["two"] - runs["one"]).abs().max() / update.abs().max()).item() < EXACT_AFTER_ADAM
    assert ((runs["wrong"] - runs["one"]).abs().max() / update.abs().max()).item() > WRONG


def test_shares_are_contiguous_so_ranks_get_whole_problems():
    rollouts_of_two_problems = [(p, r) for p in range(2) for r in range(8)]
    assert distributed.share(rollouts_of_two_problems, 0, 2) == [(0, r) for r in range(8)]
    assert distributed.share(rollouts_of_two_problems, 1, 2) == [(1, r) for r in range(8)]
    assert [len(distributed.share(range(7), rank, 2)) for rank in (0, 1)] == [4, 3]
    assert sum((distributed.share(range(7), rank, 3) for rank in range(3)), []) == list(range(7))


def grpo_args(root, name, **overrides) -> list:
    """The arguments of `train_grpo` for one run into `root/name`."""
    settings = dict(strategy="batched_stop", batch_size=4, device="cpu", dtype="float64",
                    compile="off", steps=3, num_rollouts=4, problems_per_step=2, max_new_tokens=12,
                    temperature=1.0, top_p=1.0, lr=1e-3, grad_clip=1.0, seed=0,
                    checkpoint_every=2, eval_every=2, eval_problems=6, train_problems=None,
                    skip_zero_advantage=False, prompt_style="base", threads=1) | overrides
    return [str(root / "model"), str(root / "train.jsonl"), str(root / "test.jsonl"),
            TrainingFiles(**training_files(root / name)), GRPOSettings(**settings), dict(settings),
            {"model": "tiny", "dataset": "arith"}]


@pytest.mark.slow
def test_grpo_on_two_ranks_trains_like_one_two_problems_a_step(setup):
    """End to end: each rank generates and scores its problem's rollouts, rewards are
    gathered for the advantages, evaluation is shared, rank 0 writes; float64."""
    one = distributed.launch(train_grpo, 1, *grpo_args(setup, "grpo-one"))
    two = distributed.launch(train_grpo, 2, *grpo_args(setup, "grpo-two"))
    assert (one["world_size"], two["world_size"]) == (1, 2)
    assert two["problems_per_step"] == 2 and two["steps"] == 3
    for key in ("eval_acc_before", "eval_acc_after", "reward_first_quarter",
                "reward_last_quarter", "skipped_updates"):
        assert two[key] == one[key], key
    log_one, log_two = (list(csv_rows(setup / name / "log.csv")) for name in ("grpo-one", "grpo-two"))
    assert [r["rollouts_digest"] for r in log_two] == [r["rollouts_digest"] for r in log_one]
    assert 0 < float(log_one[1]["reward_avg"]) < 1  # mixed rewards: a real update
    update = flat(weights(setup / "grpo-one")) - flat(load_file(setup / "model" / "model.safetensors")).double()
    assert update.abs().max() > 1e-4
    difference = flat(weights(setup / "grpo-two")) - flat(weights(setup / "grpo-one"))
    assert (difference.abs().max() / update.abs().max()).item() < EXACT_AFTER_ADAM
    assert not (setup / "grpo-two" / "checkpoints").exists()  # a finished run leaves none


def csv_rows(path):
    import csv

    with open(path) as f:
        yield from csv.DictReader(f)


# --- resume -------------------------------------------------------------------------------

def start_distill(root, name, world_size, **overrides):
    """A distillation run in its own process, as the workflow's job runs it."""
    code = ("import json, sys; from batched_reasoning.training.distributed import launch; "
            "from batched_reasoning.stages.distill import DistillSettings, distill; "
            "from batched_reasoning.training.settings import TrainingFiles; "
            "a = json.loads(sys.argv[1]); "
            "launch(distill, a['world_size'], a['model'], a['teacher'], "
            "TrainingFiles(**a['files']), DistillSettings(**a['settings']), a['params'], "
            "a['labels'])")
    payload = json.dumps(distill_spec(root, name, **overrides) | {"world_size": world_size})
    return subprocess.Popen([sys.executable, "-c", code, payload])


@pytest.mark.slow
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


@pytest.mark.slow
def test_ranks_and_shares_are_checked_in_both_stages(setup):
    with pytest.raises(RuntimeError, match="failed on 2 ranks"):
        distributed.launch(distill, 2, *distill_args(setup, "idle", examples_per_step=1))
    with pytest.raises(RuntimeError, match="failed on 3 ranks"):
        distributed.launch(train_grpo, 3, *grpo_args(setup, "idle-grpo", num_rollouts=2,
                                                     problems_per_step=1))


@needs_cuda("needs a CUDA GPU")
def test_resumed_optimizer_state_lands_on_the_ranks_own_device(setup, tmp_path):
    from batched_reasoning.training.state import resume, save_training_state

    model = load_model(setup / "model")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.tensor([[1, 2, 3]])).sum().backward()
    optimizer.step()
    save_training_state(tmp_path, model, optimizer, 1, setup / "model")
    device = torch.device("cuda", torch.cuda.device_count() - 1)
    _, resumed, _, _ = resume(tmp_path, lambda m: torch.optim.AdamW(m.parameters()), "float32",
                              device)
    states = [t for s in resumed.state.values() for t in s.values() if torch.is_tensor(t)]
    assert states and all(t.device == device or t.dim() == 0 for t in states)
