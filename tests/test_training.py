"""The one training-run identity of pretraining, GRPO and distillation."""

import os

from batched_reasoning.training import (
    claim_work_dir,
    files_digest,
    run_identity,
    settings_of,
)


def stage(path, *, lr, steps, params, labels):
    return settings_of(stage, locals())


def test_settings_are_the_keyword_arguments_without_provenance():
    assert stage("a/path", lr=0.1, steps=3, params={"x": 1}, labels={"m": "toy"}) == {
        "lr": 0.1, "steps": 3}


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
