"""Pretraining the toy model: the loss falls, the checkpoint reloads, a killed run resumes exactly."""

import json
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
import torch
from conftest import training_files
from safetensors.torch import load_file

from batched_reasoning.world.arith import direct_answer, make_arith
from batched_reasoning.model.checkpoint import load_model
from batched_reasoning.core.io import read_jsonl, write_jsonl
from batched_reasoning.stages.pretrain import learning_rate, pretraining_examples, shows_work
from batched_reasoning.data.prompts import TextTokenizer, render_prompt
from batched_reasoning.world.toy import build_toy_model
from batched_reasoning.world.toy_tokenizer import build_toy_tokenizer

ARCH = dict(vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, intermediate_size=64, max_position_embeddings=512,
            rope_theta=10000.0)


@pytest.fixture(scope="module")
def init(tmp_path_factory):
    root = tmp_path_factory.mktemp("pretrain")
    write_jsonl(make_arith(0, 256, 10)["train"], root / "train.jsonl")
    build_toy_tokenizer(root / "train.jsonl", root / "tokenizer", vocab_size=ARCH["vocab_size"])
    build_toy_model(root / "tokenizer", root / "init", architecture=ARCH, seed=0)
    return root


def run_pretrain(root, out, steps, checkpoint_every=10**6):
    """The pretraining stage in its own process, as the workflow runs it."""
    settings = dict(steps=steps, batch_size=8, lr=3e-3, warmup=5, weight_decay=0.01,
                    worked_share=0.4, checkpoint_every=checkpoint_every, seed=0, device="cpu",
                    threads=1)
    code = (
        "from batched_reasoning.stages.pretrain import PretrainSettings, pretrain; "
        "from batched_reasoning.training.settings import TrainingFiles; import json, sys; "
        "a = json.loads(sys.argv[3]); "
        "pretrain(sys.argv[1], sys.argv[2], TrainingFiles(**a['files']), "
        "PretrainSettings(**a['settings']), {})"
    )
    return subprocess.Popen([sys.executable, "-c", code, str(root / "init"),
                             str(root / "train.jsonl"),
                             json.dumps({"files": training_files(out), "settings": settings})])


@pytest.mark.slow
def test_loss_falls_and_checkpoint_reloads(init, tmp_path):
    assert run_pretrain(init, tmp_path, steps=60).wait() == 0
    log = pd.read_csv(tmp_path / "log.csv")
    assert len(log) == 60
    assert log.loss.tail(10).mean() < 0.7 * log.loss.head(5).mean()
    model = load_model(tmp_path / "model")
    assert (tmp_path / "model" / "tokenizer.json").is_file()
    with torch.no_grad():
        assert model(torch.tensor([[1, 2, 3]])).isfinite().all()


@pytest.mark.slow
def test_killed_run_resumes_to_identical_weights(init, tmp_path):
    steps = 200
    assert run_pretrain(init, tmp_path / "straight", steps).wait() == 0

    killed = tmp_path / "killed"
    proc = run_pretrain(init, killed, steps, checkpoint_every=20)
    deadline = time.time() + 120
    while not list((killed / "checkpoints").glob("step-*/trainer_state.pt")):
        assert proc.poll() is None and time.time() < deadline, "no checkpoint before the end"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / "model").exists(), "killed before the end: no final model"

    assert run_pretrain(init, killed, steps, checkpoint_every=20).wait() == 0
    metrics = json.loads((killed / "metrics.json").read_text())
    assert metrics["resumed_from_step"] > 0
    straight = load_file(tmp_path / "straight" / "model" / "model.safetensors")
    resumed = load_file(killed / "model" / "model.safetensors")
    assert straight.keys() == resumed.keys()
    assert all(torch.equal(straight[k], resumed[k]) for k in straight)
    assert len(pd.read_csv(killed / "log.csv")) == steps


def test_schedule_warms_up_then_decays_to_a_tenth():
    assert learning_rate(0, 100, 1.0, 10) == pytest.approx(0.1)
    assert learning_rate(9, 100, 1.0, 10) == pytest.approx(1.0)
    assert learning_rate(10, 100, 1.0, 10) == pytest.approx(1.0)
    assert learning_rate(55, 100, 1.0, 10) == pytest.approx(0.55)  # cosine at its middle
    assert learning_rate(100, 100, 1.0, 10) == pytest.approx(0.1)


def test_corpus_answers_after_the_books_prompt_a_share_of_them_worked(init):
    records = read_jsonl(init / "train.jsonl")
    tokenizer = TextTokenizer.from_model_dir(init / "init")
    examples = pretraining_examples(records, tokenizer, worked_share=0.4, seed=0)
    worked = shows_work(len(records), 0.4, seed=0)
    assert 0.3 < worked.mean() < 0.5
    for record, example, shows in zip(records, examples, worked):
        prompt = tokenizer.encode(render_prompt(record["problem"]))
        assert example.ids[:example.prompt_len] == prompt  # context, not a target
        answer = tokenizer.decode(example.ids[example.prompt_len:])
        assert answer == " " + (record["solution"] if shows else direct_answer(record["answer"]))
        assert example.ids[-1] == tokenizer.eos_token_id
