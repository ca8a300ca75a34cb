"""The one training-run identity of pretraining, GRPO and distillation; packed batches."""

import os

import pytest
import torch
from conftest import PAD, random_model

from batched_reasoning.training.examples import Example, collate, pack
from batched_reasoning.training.losses import packed_token_mean_nll, token_mean_nll
from batched_reasoning.training.state import claim_work_dir, files_digest, run_identity


def test_digest_follows_contents_not_timestamps_or_hidden_copies(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights")
    (model / "config.json").write_text("{}")
    digest = files_digest([model])
    os.utime(model / "config.json", (1, 1))
    (model / ".model.safetensors.partial").write_bytes(b"half")
    assert files_digest([model]) == digest
    (model / "config.json").write_text('{"changed": 1}')
    assert files_digest([model]) != digest
    assert files_digest([model / "config.json"]) != files_digest([model / "model.safetensors"])


def test_work_dir_is_kept_only_for_the_same_run(tmp_path, capsys):
    data, start = tmp_path / "train.jsonl", tmp_path / "start"
    data.write_text("{}\n")
    start.mkdir()
    (start / "model.safetensors").write_bytes(b"weights")
    work = tmp_path / "checkpoints"
    identity = run_identity("training", {"lr": 0.1}, [data], start)
    claim_work_dir(work, identity)
    (work / "step-000002").mkdir()

    claim_work_dir(work, run_identity("training", {"lr": 0.1}, [data], start))
    assert (work / "step-000002").is_dir()
    assert capsys.readouterr().out == ""

    (start / "model.safetensors").write_bytes(b"other weights")
    claim_work_dir(work, run_identity("training", {"lr": 0.2}, [data], start))
    assert not (work / "step-000002").exists()
    message = capsys.readouterr().out
    assert "discarding checkpoints of another run (changed: settings, start)" in message
    assert message.count("\n") == 1

    (work / "run.json").unlink()  # a folder without a record is never trusted
    (work / "step-000004").mkdir()
    claim_work_dir(work, identity)
    assert not (work / "step-000004").exists()


def packable_examples():
    """Examples of very different lengths, so packing puts several in one row."""
    generator = torch.Generator().manual_seed(0)
    lengths = [(40, 12), (9, 3), (25, 20), (7, 5), (60, 30), (12, 4), (5, 2), (33, 10)]
    return [Example(torch.randint(4, 97, (n,), generator=generator).tolist(), prompt)
            for n, prompt in lengths]


def test_packing_fills_rows_and_marks_each_examples_answer():
    examples = packable_examples()
    input_ids, segment_ids, loss_mask = pack(examples, PAD, capacity=64)
    assert input_ids.shape[0] < len(examples)  # several examples share a row
    for i, example in enumerate(examples):
        row, positions = (segment_ids == i + 1).nonzero(as_tuple=True)
        assert row.unique().numel() == 1 and positions.tolist() == list(
            range(positions[0], positions[0] + len(example.ids)))  # one contiguous run
        assert input_ids[row, positions].tolist() == example.ids
        assert loss_mask[row, positions].tolist() == [
            t >= example.prompt_len for t in range(len(example.ids))]
    assert not loss_mask[segment_ids == 0].any()


def test_packed_loss_is_the_loss_of_the_examples_one_per_row():
    """In float64 (rounding ~1e-16 per operation) packed rows give what the examples give
    padded one per row: a token that saw another example, or a position that did not restart,
    changes the loss by orders of magnitude more than 1e-10."""
    model = random_model().double()
    examples = packable_examples()
    padded = token_mean_nll(model, *collate(examples, PAD))
    packed = packed_token_mean_nll(model, *pack(examples, PAD, capacity=64))
    assert packed.item() == pytest.approx(padded.item(), rel=1e-10)
    loss = packed_token_mean_nll(model, *pack(examples, PAD, capacity=64))
    loss.backward()
    packed_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    token_mean_nll(model, *collate(examples, PAD)).backward()
    for packed_grad, p in zip(packed_grads, model.parameters()):
        torch.testing.assert_close(packed_grad, p.grad, rtol=1e-9, atol=1e-12)
