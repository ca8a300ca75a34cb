"""Distillation: the book's example layout, the padding-aware loss, and exact resumption."""

import json
import math
import shutil

import pandas as pd
import pytest
import torch
from conftest import random_model, shared_file, training_files

import batched_reasoning.stages.distill as distill_module
from batched_reasoning.world.arith import make_arith
from batched_reasoning.model.checkpoint import load_model, save_model
from batched_reasoning.data.records import DatasetError
from batched_reasoning.stages.distill import (
    DistillSettings,
    Example,
    answer_text,
    build_example,
    collate,
    distill,
    epoch_batches,
    mean_loss,
    train_step,
    training_examples,
)
from batched_reasoning.engine.padding import batches, pad_fraction
from batched_reasoning.training.settings import TrainingFiles
from batched_reasoning.data.prompts import TextTokenizer, format_prompt
from batched_reasoning.workflow.names import student_name
from batched_reasoning.workflow.training_tables import distill_table, evaluations
from batched_reasoning.world.teacher import load_teacher_rows, make_teacher_traces
from batched_reasoning.world.toy_tokenizer import train_toy_tokenizer, training_text
from batched_reasoning.training.losses import masked_nll

ARITH = make_arith(seed=0, n_train=60, n_test=2)["train"]


@pytest.fixture(scope="module")
def toy_dir(tmp_path_factory):
    """A tiny random Qwen3 whose vocabulary is a toy tokenizer trained on arith texts."""
    source, directory = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("toy")
    tokenizer = train_toy_tokenizer([training_text(r) for r in ARITH], 300)
    tokenizer.save(str(source / "tokenizer.json"))
    save_model(random_model(vocab_size=tokenizer.get_vocab_size(with_added_tokens=True)),
               directory, source=source)
    return directory


@pytest.fixture(scope="module")
def tokenizer(toy_dir):
    return TextTokenizer.from_model_dir(toy_dir, "base")


@pytest.fixture(scope="module")
def examples(tokenizer):
    return [build_example(r, tokenizer, "base", True) for r in make_teacher_traces(ARITH[:12])]


def test_arith_traces_think_in_steps_and_conclude_with_the_box():
    row = make_teacher_traces(ARITH[:1])[0]
    record = ARITH[0]
    assert row == {
        "problem": record["problem"], "gtruth_answer": record["answer"],
        "message_thinking": record["solution"].rsplit("\n", 1)[0],
        "message_content": f"The answer is \\boxed{{{record['answer']}}}.",
    }
    assert "=" in row["message_thinking"] and "boxed" not in row["message_thinking"]


def test_example_is_prompt_then_answer_then_end_token(tokenizer):
    row = make_teacher_traces(ARITH[:1])[0]
    for think, answer in ((True, f"<think>{row['message_thinking']}</think>\n\n{row['message_content']}"),
                          (False, f"{row['message_thinking']}\n\n{row['message_content']}")):
        assert answer_text(row, think) == answer
        example = build_example(row, tokenizer, "base", think)
        assert example.ids[-1] == tokenizer.eos_token_id
        assert tokenizer.decode(example.ids[:example.prompt_len]) == format_prompt(row["problem"], "base")
        assert tokenizer.decode(example.ids[example.prompt_len:]) == answer


def test_examples_match_the_book_with_the_real_qwen3_tokenizer(tmp_path):
    """Same token ids and prompt length as the book's ch08.build_examples, on real teacher rows."""
    build_examples = pytest.importorskip("reasoning_from_scratch.ch08").build_examples
    Qwen3Tokenizer = pytest.importorskip("reasoning_from_scratch.qwen3").Qwen3Tokenizer

    shutil.copy(shared_file("qwen3-tokenizer.json"), tmp_path / "tokenizer.json")
    rows = json.loads(shared_file("distill_sample_outputs.json").read_text())
    book = Qwen3Tokenizer(tmp_path / "tokenizer.json", apply_chat_template=True,
                          add_generation_prompt=True, add_thinking=True)
    theirs, skipped = build_examples(rows, book)
    ours = TextTokenizer.from_model_dir(tmp_path, "reasoning")
    assert skipped == 0
    assert [build_example(r, ours, "reasoning", True) for r in rows] == [
        Example(e["token_ids"], e["prompt_len"]) for e in theirs]


def test_batched_loss_is_the_mean_of_per_example_losses(toy_dir, tokenizer, examples):
    model = load_model(toy_dir)
    assert len({len(e.ids) for e in examples}) > 1  # the batch really is padded
    batched = masked_nll(model, *collate(examples, tokenizer.pad_token_id))
    alone = [masked_nll(model, *collate([e], tokenizer.pad_token_id)) for e in examples]
    assert batched.item() == pytest.approx(torch.stack(alone).mean().item(), abs=1e-6)


def test_only_answer_tokens_are_trained_and_padding_is_inert(toy_dir, tokenizer, examples):
    model = load_model(toy_dir)
    input_ids, attention_mask, loss_mask = collate(examples[:5], tokenizer.pad_token_id)
    captured = {}

    def perturb_embeddings(module, args, output):
        captured["delta"] = torch.zeros_like(output, requires_grad=True)
        return output + captured["delta"]

    def keep_logits(ids, mask):
        captured["logits"] = logits = model(ids, mask)
        logits.retain_grad()
        return logits

    model.model.embed_tokens.register_forward_hook(perturb_embeddings)
    masked_nll(keep_logits, input_ids, attention_mask, loss_mask).backward()
    scored = captured["logits"].grad.abs().sum(-1) > 0  # position t predicts token t + 1
    assert torch.equal(scored[:, :-1], loss_mask[:, 1:]) and not scored[:, -1].any()
    for row, example in enumerate(examples[:5]):  # the loss starts at the first answer token
        assert loss_mask[row].sum() == len(example.ids) - example.prompt_len
    influence = captured["delta"].grad.abs().sum(-1) > 0
    assert not influence[~attention_mask].any()  # padding changes nothing
    assert influence[attention_mask & ~loss_mask].any()  # while the prompt is context


def test_length_sorting_changes_padding_not_the_objective(toy_dir, tokenizer, examples):
    model = load_model(toy_dir)
    lengths = [len(e.ids) for e in examples]

    def epoch_loss(groups):
        losses = [masked_nll(model, *collate([examples[i] for i in g], tokenizer.pad_token_id)).item()
                  * len(g) for g in groups]
        return sum(losses) / len(examples)

    shuffled = epoch_batches(lengths, 4, seed=1, epoch=0, sort_by_length=False)
    bucketed = epoch_batches(lengths, 4, seed=1, epoch=0, sort_by_length=True)
    assert sorted(i for g in bucketed for i in g) == list(range(len(examples)))
    def padding(groups):
        return pad_fraction([[lengths[i] for i in g] for g in groups])

    assert padding(bucketed) < padding(shuffled)
    assert epoch_loss(bucketed) == pytest.approx(epoch_loss(shuffled), abs=1e-6)
    assert epoch_loss(bucketed) == pytest.approx(mean_loss(model, examples, 4, tokenizer.pad_token_id),
                                                 abs=1e-6)
    assert epoch_batches(lengths, 4, 1, 1, True) != bucketed  # each epoch its own order


@pytest.mark.parametrize("batch_size", [1, 3])
def test_any_batch_size_makes_the_update_of_the_whole_step(toy_dir, tokenizer, examples, batch_size):
    """Micro-batches of 1 or 3 of a 4-example step accumulate the gradient of the step's mean
    per-example loss, as one batch of 4 computes it (float64, so only summation order differs:
    ~1e-15 relative); dropping the micro-batches' shares of the step breaks it."""
    def gradients(batch_size, share_scaled=True):
        model = load_model(toy_dir).double()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # keeps the gradients readable
        step = examples[:4]
        if share_scaled:
            train_step(model, optimizer, step, len(step), batch_size, tokenizer.pad_token_id,
                       None, "cpu")
        else:  # the mistake to catch: each micro-batch's mean, unweighted
            optimizer.zero_grad()
            for part in batches(step, batch_size):
                masked_nll(model, *collate(part, tokenizer.pad_token_id)).backward()
        return torch.cat([p.grad.flatten() for p in model.parameters()])

    whole = gradients(4)
    assert (gradients(batch_size) - whole).abs().max() <= 1e-12 * whole.abs().max()
    assert (gradients(batch_size, share_scaled=False) - whole).abs().max() > 0.1 * whole.abs().max()


def test_malformed_teacher_rows_are_counted_not_fatal(tmp_path):
    good = make_teacher_traces(ARITH[:3])
    bad = [{"problem": "1+1?"}, good[0] | {"message_thinking": None}, "text",
           good[1] | {"message_content": "  "}]
    path = tmp_path / "teacher.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in good + bad))
    rows, report = load_teacher_rows(path)
    assert rows == good
    assert report["n_rows"] == 7 and report["n_malformed"] == 4
    assert report["malformed"][0] == \
        "record 3 (line 4): missing gtruth_answer, message_thinking, message_content"
    assert "message_thinking is NoneType" in report["malformed"][1]
    path.write_text(path.read_text() + '{"problem": "cut off\n')
    with pytest.raises(DatasetError, match=r"(?s)teacher.jsonl.*line 8: invalid JSON"):
        load_teacher_rows(path)  # a broken file is not a malformed row: nothing to skip to


def run(toy_dir, tmp_path, teacher, name, **overrides):
    out = tmp_path / name
    settings = dict(prompt_style="base", batch_size=4, examples_per_step=4, device="cpu",
                    dtype="float32", epochs=2,
                    lr=5e-4, max_seq_len=overrides.pop("max_seq_len"), validation_size=6,
                    max_examples=None,
                    use_think_tokens=True, sort_by_length=True, grad_clip=1.0, seed=3, log_every=5,
                    checkpoint_every=3, threads=1) | overrides
    metrics = distill(str(toy_dir), str(teacher), TrainingFiles(**training_files(out)),
                      DistillSettings(**settings),
                      params={k: v for k, v in settings.items() if k != "threads"},
                      labels={"model": "tiny", "dataset": "arith", "batch_size": "4", "device": "cpu"})
    return out, metrics


def test_killed_run_resumes_to_the_same_weights(toy_dir, tokenizer, tmp_path, monkeypatch):
    rows = make_teacher_traces(ARITH[:40])
    teacher = tmp_path / "teacher.json"
    teacher.write_text(json.dumps(rows + [{"problem": "no answer"}, {"problem": 3}]))
    lengths = sorted(len(build_example(r, tokenizer, "base", True).ids) for r in rows)
    max_seq_len = lengths[-3] - 1 if lengths[-3] > lengths[0] else lengths[-1]
    n_too_long = sum(n > max_seq_len for n in lengths)

    full, metrics = run(toy_dir, tmp_path, teacher, "full", max_seq_len=max_seq_len)
    assert metrics["n_malformed"] == 2 and metrics["n_too_long"] == n_too_long > 0
    assert metrics["n_train"] == 40 - n_too_long - 6
    assert metrics["steps"] == 2 * math.ceil(metrics["n_train"] / 4)
    assert metrics["final_val_loss"] < metrics["initial_val_loss"]
    assert 0 < metrics["pad_fraction"] < metrics["pad_fraction_unsorted"]
    assert not (full / "checkpoints").exists()

    class Killed(Exception):
        pass

    calls = {"train": 0}
    real_nll = distill_module.masked_nll

    def dies_in_step_8(*args):
        if torch.is_grad_enabled():
            calls["train"] += 1
            if calls["train"] == 8:
                raise Killed
        return real_nll(*args)

    monkeypatch.setattr(distill_module, "masked_nll", dies_in_step_8)
    with pytest.raises(Killed):
        run(toy_dir, tmp_path, teacher, "killed", max_seq_len=max_seq_len)
    monkeypatch.setattr(distill_module, "masked_nll", real_nll)
    checkpoints = tmp_path / "killed" / "checkpoints"
    assert [p.name for p in checkpoints.glob("step-*")] == ["step-000006"]  # older ones pruned

    resumed, metrics = run(toy_dir, tmp_path, teacher, "killed", max_seq_len=max_seq_len)
    assert metrics["resumed_from_step"] == 6
    a, b = load_model(full / "model").state_dict(), load_model(resumed / "model").state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    losses = ["epoch", "step", "train_loss", "val_loss", "pad_fraction"]
    pd.testing.assert_frame_equal(pd.read_csv(full / "log.csv")[losses],
                                  pd.read_csv(resumed / "log.csv")[losses])
    assert (resumed / "model" / "tokenizer.json").read_bytes() == (toy_dir / "tokenizer.json").read_bytes()
    assert TextTokenizer.from_model_dir(resumed / "model").eos_token_id == tokenizer.eos_token_id


def test_checkpoint_of_other_settings_is_not_resumed(toy_dir, tmp_path, monkeypatch):
    teacher = tmp_path / "teacher.json"
    teacher.write_text(json.dumps(make_teacher_traces(ARITH[:20])))

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(distill_module, "plot_curve", killed)  # dies after training, checkpoint kept
        with pytest.raises(KeyboardInterrupt):
            run(toy_dir, tmp_path, teacher, "run", max_seq_len=512, epochs=1)
    assert (tmp_path / "run" / "checkpoints").exists()
    _, metrics = run(toy_dir, tmp_path, teacher, "run", max_seq_len=512, epochs=1, lr=1e-4)
    assert metrics["resumed_from_step"] == 0


def test_table_compares_batch_sizes_world_sizes_and_takes_accuracies_per_device(tmp_path):
    paths = []
    for device, batch_size, world_size, speed, seconds in (
        ("cpu", 1, 1, 100.0, 5.0), ("cpu", 4, 1, 300.0, 5.0), ("cpu", 4, 2, 500.0, 3.0),
        ("cuda", 4, 1, 900.0, 1.0),
    ):
        path = tmp_path / f"{device}-bs{batch_size}-ws{world_size}.json"
        path.write_text(json.dumps({
            "seed": 0, "model": "toy", "dataset": "arith", "batch_size": batch_size,
            "device": device, "world_size": world_size, "dtype": "float32", "n_train": 10,
            "steps": 10, "train_seconds": seconds, "tokens_per_second": speed,
            "pad_fraction": 0.1, "pad_fraction_unsorted": 0.3, "peak_memory_mb": 200.0,
            "initial_val_loss": 3.0, "final_val_loss": 1.0, "n_too_long": 0, "n_malformed": 0}))
        paths.append(str(path))
    evaluated = []
    for model, device, correct, truncated in (
        ("toy", "cpu", [1, 0, 0, 0], 0), ("toy", "cuda", [1, 1, 0, 0], 0),
        (student_name("toy", 4, "cpu"), "cpu", [1, 1, 0, 1], 2),
    ):
        run = tmp_path / f"eval-{model}-{device}"
        run.mkdir()
        (run / "metrics.json").write_text(json.dumps({
            "seed": 0, "model": model, "dataset": "arith", "device": device,
            "accuracy": sum(correct) / len(correct), "truncated": truncated}))
        (run / "records.jsonl").write_text(
            "".join(json.dumps({"index": i, "correct": bool(c)}) + "\n"
                    for i, c in enumerate(correct)))
        evaluated.append(run / "metrics.json")
    table = distill_table(paths, evaluations(evaluated))
    assert table["device"].tolist() == ["cpu"] * 3 + ["cuda"]
    assert table["speedup_vs_bs1"].tolist()[:2] == [1.0, 3.0]
    assert math.isnan(table["speedup_vs_bs1"].iloc[2])  # no one-example run on two ranks
    assert table["scaling_vs_1_rank"].tolist()[:3] == [1.0, 1.0, pytest.approx(5 / 3)]
    assert table["student"].tolist() == ["toy-distilled-bs1-cpu", "toy-distilled-bs4-cpu",
                                         "toy-distilled-bs4-cpu-ws2", "toy-distilled-bs4-cuda"]
    assert table["base_accuracy"].tolist() == [0.25] * 3 + [0.5]
    assert table["student_accuracy"].isna().tolist() == [True, False, True, True]
    # paired on the same problems: two gained, none lost; differences 0, 1, 0, 1
    gain = table.iloc[1]
    assert gain["accuracy_gain"] == 0.5
    half = 1.959964 * (1 / 3) ** 0.5 / 2  # sample sd of (0, 1, 0, 1) is sqrt(1/3)
    assert gain["accuracy_gain_lo"] == pytest.approx(0.5 - half, rel=1e-5)
    assert gain["accuracy_gain_hi"] == pytest.approx(0.5 + half, rel=1e-5)
    assert table["accuracy_gain"].isna().tolist() == [True, False, True, True]
    assert table["student_truncated"].iloc[1] == 2


def test_too_few_traces_that_fit_say_how_many_and_which_max_seq_len_keeps_enough(tokenizer,
                                                                                tmp_path):
    """Issue 56: traces longer than `max_seq_len` (the book's teacher answers are 649-1939
    tokens) are dropped before `max_examples` is applied; where too few are left for the held-out
    set and one step, the job says so with the numbers instead of 'no training data'."""
    rows = make_teacher_traces(ARITH[:30])
    teacher = tmp_path / "teacher.json"
    teacher.write_text(json.dumps(rows))
    lengths = sorted(len(build_example(r, tokenizer, "base", True).ids) for r in rows)
    settings = dict(prompt_style="base", batch_size=4, examples_per_step=4, device="cpu",
                    dtype="float32", epochs=1, lr=1e-4, validation_size=6, max_examples=3,
                    use_think_tokens=True, sort_by_length=False, grad_clip=1.0, seed=0,
                    log_every=5, checkpoint_every=3, threads=1)
    fits = sum(n <= lengths[4] for n in lengths)
    with pytest.raises(ValueError, match=(
            rf"teacher.json: {fits} of 30 traces fit distill.max_seq_len {lengths[4]} \(they are "
            rf"{lengths[0]} to {lengths[-1]} tokens\), but distill.validation_size 6 and one step "
            rf"of distill.examples_per_step 4 need 10; max_seq_len {lengths[9]} would keep 10")):
        training_examples(str(teacher), tokenizer,
                          DistillSettings(max_seq_len=lengths[4], **settings))
    train, validation, report = training_examples(
        str(teacher), tokenizer, DistillSettings(max_seq_len=lengths[9], **settings))
    assert len(validation) == 6 and len(train) == 3  # max_examples of the traces that fit
    assert all(len(e.ids) <= lengths[9] for e in train + validation)
    assert report["n_too_long"] == sum(n > lengths[9] for n in lengths) > 0
