"""The timing of GRPO's and distillation's first steps: every setting and every repeat does the
same work as the training run's first steps, one at a time and batched."""

import json

import pandas as pd
import pytest
from test_distill import ARITH, run as distill_run, toy_dir  # noqa: F401 (fixture)
from test_grpo import CONFIG, run as grpo_run, setup  # noqa: F401 (fixture)

from batched_reasoning.core.timing import Repeats
from batched_reasoning.stages.training_timing import time_distill, time_grpo
from batched_reasoning.world.teacher import make_teacher_traces

REPEATS = Repeats(minimum=2, maximum=2, relative_half_width=1.0)


def test_grpo_timing_draws_the_training_runs_rollouts(setup, tmp_path):  # noqa: F811
    config = {k: v for k, v in CONFIG.items() if k not in ("strategy", "batch_size", "device",
                                                            "dtype", "seed", "prompt_style",
                                                            "threads", "steps")}
    metrics = time_grpo(
        str(setup / "model"), str(setup / "train.jsonl"), str(tmp_path / "metrics.json"),
        config=config, settings=[["batched", 4]], timed_steps=3, device="cpu",
        dtype="float32", threads=1, prompt_style="base", seed=0, repeats=REPEATS,
        params={}, labels={"seed": "0", "model": "tiny", "dataset": "arith", "device": "cpu"})
    assert json.loads((tmp_path / "metrics.json").read_text())["runs"] == metrics["runs"]
    one, batched = metrics["runs"]
    assert (one["strategy"], one["batch_size"]) == ("sequential", 1)
    assert (batched["strategy"], batched["batch_size"]) == ("batched", 4)
    for run in metrics["runs"]:
        assert run["repeats"] == 2 and run["repeats_agree"]  # each repeat restarts the same
        assert run["same_steps"] == run["compared_steps"] == 3
        assert all(s["work_s"] > s["generation_s"] > 0 for s in run["samples"])
    assert metrics["setup_s"] > 0 and metrics["timed_steps"] == 3

    # the same work as a training run's first 3 steps: its rollouts, step by step
    grpo_run(setup, "trained", steps=3, eval_every=3)
    log = pd.read_csv(setup / "trained" / "log.csv")
    trained = [d for d in log["rollouts_digest"].tolist() if isinstance(d, str)]
    assert one["outputs"] == batched["outputs"] == trained


def test_distillation_timing_trains_the_same_steps_at_every_batch_size(toy_dir, tmp_path):  # noqa: F811
    teacher = tmp_path / "teacher.json"
    teacher.write_text(json.dumps(make_teacher_traces(ARITH[:40])))
    config = dict(examples_per_step=4, epochs=1, lr=5e-4, max_seq_len=400, validation_size=6,
                  max_examples=None, use_think_tokens=True, sort_by_length=True, grad_clip=1.0,
                  log_every=5, checkpoint_every=3)
    metrics = time_distill(
        str(toy_dir), str(teacher), str(tmp_path / "metrics.json"), config=config,
        batch_sizes=[4], timed_steps=3, device="cpu", dtype="float32", threads=1,
        prompt_style="base", seed=3, repeats=REPEATS, params={}, labels={})
    one, batched = metrics["runs"]
    assert (one["batch_size"], batched["batch_size"]) == (1, 4)
    assert all(run["repeats_agree"] for run in metrics["runs"])
    # float32: batching reorders sums, so the losses agree to rounding (appendix_e's tolerance)
    assert batched["max_loss_difference"] < 1e-4
    assert metrics["timed_steps"] == 3

    # the first steps' losses are the training run's (same seed, batches and start)
    out, _ = distill_run(toy_dir, tmp_path, teacher, "trained", max_seq_len=400, epochs=1,
                         batch_size=4, examples_per_step=4)
    log = pd.read_csv(out / "log.csv")
    assert one["outputs"] == pytest.approx(
        log.loc[log["step"].between(1, 3), "train_loss"].tolist(), rel=1e-6)
