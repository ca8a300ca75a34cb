"""`batch_sizes: auto`: the probe's stopping and choice from tables of trials, and real trials in
fresh processes on this CPU (a real model, a real budget that stops one)."""

import json

import pytest
import torch
from conftest import needs_cuda, random_model

from batched_reasoning.workflow import autotune
from batched_reasoning.workflow.autotune import Trial, choose, run_probe
from batched_reasoning.model.checkpoint import save_model
from batched_reasoning.core.io import write_jsonl
from batched_reasoning.world.arith import make_arith
from batched_reasoning.world.toy_tokenizer import train_toy_tokenizer, training_text

BUDGET = 10_000.0


def table(rates: dict[int, list[float] | str], peaks: dict[int, float] | None = None):
    """A `run_trial` that answers from a table: size -> repeats' tokens/s, or a status."""
    asked = []

    def run_trial(size: int) -> Trial:
        asked.append(size)
        entry = rates[size]
        peak = (peaks or {}).get(size, 1000.0 + size)
        if isinstance(entry, str):
            return Trial(size, entry, peak_memory_mb=peak if entry == "over budget" else None)
        return Trial(size, "ok", list(entry), peak_memory_mb=peak)

    run_trial.asked = asked
    return run_trial


def steady(*medians):
    return {2**i: [m] * 3 for i, m in enumerate(medians)}


def test_a_plateau_stops_after_two_doublings_without_gain_and_picks_the_knee():
    trials = table(steady(100, 190, 360, 370, 372, 1000))
    probe = run_probe(trials, BUDGET, cap=1024)
    assert trials.asked == [1, 2, 4, 8, 16]  # 8 and 16 gained < 5% over 4: 32 never runs
    assert probe["batch_size"] == 4  # 360 is within 95% of the best, 372
    assert "gained less than 5%" in probe["stopped"]


def test_a_fall_stops_and_the_best_before_it_is_chosen():
    trials = table(steady(100, 190, 150, 140, 500))
    probe = run_probe(trials, BUDGET, cap=1024)
    assert trials.asked == [1, 2, 4, 8]
    assert probe["batch_size"] == 2


def test_steady_gains_go_on_until_the_stage_cannot_fill_a_larger_batch():
    trials = table(steady(*[100 * 1.5**i for i in range(11)]))
    probe = run_probe(trials, BUDGET, cap=48)
    assert trials.asked == [1, 2, 4, 8, 16, 32]
    assert probe["batch_size"] == 32
    assert "largest the stage can fill" in probe["stopped"]


def test_a_size_too_close_to_the_budget_ends_the_probe_and_is_never_chosen():
    # size 8 would be the fastest, but 9000 MB leaves less than 15% of 10000 free
    trials = table(steady(100, 190, 360, 700, 900), peaks={1: 2000, 2: 3000, 4: 5000, 8: 9000})
    probe = run_probe(trials, BUDGET, cap=1024)
    assert trials.asked == [1, 2, 4, 8]
    assert probe["batch_size"] == 4
    assert "9000 MB" in probe["stopped"] and "did not fit" in probe["why"]


def test_an_out_of_memory_size_ends_the_probe():
    trials = table({1: [100] * 3, 2: [190] * 3, 4: "oom", 8: [400] * 3})
    probe = run_probe(trials, BUDGET, cap=1024)
    assert trials.asked == [1, 2, 4]
    assert probe["batch_size"] == 2
    assert probe["trials"][-1]["status"] == "oom"


def test_one_noisy_repeat_does_not_move_the_choice():
    rates = steady(100, 190, 360, 370, 372)
    rates[16] = [372, 40, 380]  # one repeat slowed down by something else on the machine
    rates[4] = [360, 2000, 355]  # and one that ran alone
    probe = run_probe(table(rates), BUDGET, cap=1024)
    assert probe["batch_size"] == 4
    assert probe["trials"][2]["median_tokens_per_second"] == 360


def test_a_budget_too_small_for_size_two_chooses_one_and_says_why():
    trials = table({1: [100] * 3, 2: "over budget", 4: [300] * 3}, peaks={1: 800, 2: 1200})
    probe = run_probe(trials, 1000.0, cap=1024)
    assert probe["batch_size"] == 1
    assert "batch size 2 did not fit (over budget, peak 1200 MB)" in probe["why"]


def test_no_size_that_fits_is_an_error_naming_the_setting():
    with pytest.raises(ValueError, match="memory_budget_mb"):
        choose([Trial(1, "over budget", peak_memory_mb=1200)], 1000.0)


def test_the_configured_budget_wins_and_the_cpu_default_is_what_is_free():
    assert autotune.device_budget_mb("cpu", 1234) == (1234.0, "memory_budget_mb.cpu")
    free, source = autotune.device_budget_mb("cpu", None)
    assert 0 < free <= __import__("psutil").virtual_memory().total / 2**20
    assert "memory" in source


# --- real trials, each in its own process -------------------------------------------------------

@pytest.fixture(scope="module")
def stage_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("autotune")
    data = make_arith(seed=0, n_train=40, n_test=12)
    source = root / "source"
    source.mkdir()
    tokenizer = train_toy_tokenizer([training_text(r) for r in data["train"]], 300)
    tokenizer.save(str(source / "tokenizer.json"))
    model = random_model(vocab_size=tokenizer.get_vocab_size(with_added_tokens=True))
    save_model(model, root / "model", source=source)
    write_jsonl(data["test"], root / "test.jsonl")
    return root


SETTINGS = {"max_new_tokens": 6, "limit": None, "timed_problems": 64, "num_samples": 3,
            "temperature": 1.0, "top_p": 1.0, "prompt_suffix": ""}


def probe_here(stage_files, stage, budget, **settings):
    out = stage_files / f"{stage}-{budget}.json"
    return autotune.probe(
        stage, str(stage_files / "model"), str(stage_files / "test.jsonl"), str(out),
        device="cpu", dtype="float32", threads=1, prompt_style="base",
        settings=SETTINGS | settings, memory_budget_mb=budget, seed=0,
        params={"seed": 0}, labels={"model": "random", "dataset": "arith", "device": "cpu"})


@pytest.mark.slow
def test_a_real_probe_measures_each_size_in_its_own_process_and_records_it(stage_files):
    record = probe_here(stage_files, "self_consistency", None, limit=3)
    sizes = [t["batch_size"] for t in record["trials"]]
    assert sizes[0] == 1 and all(b == 2 * a for a, b in zip(sizes, sizes[1:]))
    assert max(sizes) <= 9  # 3 problems x 3 samples
    for trial in record["trials"]:
        # the curves' harness: 3 repeats, more (up to 5) while the interval is wide
        repeats = len(trial["tokens_per_second"])
        assert trial["status"] == "ok" and 3 <= repeats <= 5 and trial["interval"]["n"] == repeats
        assert trial["peak_memory_mb"] > 50  # a whole Python process with torch, not a tensor
    assert record["batch_size"] in sizes
    assert record["thresholds"]["headroom"] == autotune.HEADROOM
    assert record["torch_version"] == torch.__version__ and record["cpu_class"]
    saved = json.loads((stage_files / "self_consistency-None.json").read_text())
    assert saved["batch_size"] == autotune.chosen_batch_size(stage_files / "self_consistency-None.json")


def test_a_trial_over_the_cpu_budget_is_stopped_not_left_to_the_oom_killer(stage_files):
    """A budget below what one process needs: the parent stops size 1 at the budget, and the
    probe refuses with the setting to change instead of choosing a size that cannot run."""
    with pytest.raises(ValueError, match="no batch size fits the 100 MB memory budget with 15% "
                                         "headroom: batch size 1 over budget, peak [0-9]+ MB "
                                         r"\(stopped at"):
        probe_here(stage_files, "evaluate", 100)


@needs_cuda("needs a CUDA GPU to run out of")
def test_a_gpu_out_of_memory_ends_the_probe_and_the_size_before_it_is_chosen(tmp_path):
    """1024 prompts of ~4000 tokens on a tiny model: the prefill's mask and its per-group
    copies take ~0.3 GB a row, so doubling the batch runs the GPU out of memory well before
    1024 rows. The trial reports CUDA's OutOfMemoryError as `oom` (not a failure), the probe
    stops there, and a size that ran is chosen. The budget is set far above the GPU so that
    the OOM, not the budget, stops it."""
    source = tmp_path / "source"
    source.mkdir()
    problem = " ".join(["7"] * 4000)
    tokenizer = train_toy_tokenizer([problem, "The answer is 7."], 300)
    tokenizer.save(str(source / "tokenizer.json"))
    model = random_model(vocab_size=tokenizer.get_vocab_size(with_added_tokens=True),
                         max_position_embeddings=8192)
    save_model(model, tmp_path / "model", source=source)
    write_jsonl([{"problem": problem, "answer": "7"}] * 1024, tmp_path / "test.jsonl")
    record = autotune.probe(
        "evaluate", str(tmp_path / "model"), str(tmp_path / "test.jsonl"),
        str(tmp_path / "probe.json"), device="cuda", dtype="float32", threads=1,
        prompt_style="base", settings=SETTINGS | {"max_new_tokens": 2}, memory_budget_mb=10**8,
        seed=0, params={"seed": 0}, labels={"model": "random", "dataset": "long", "device": "cuda"})
    statuses = [t["status"] for t in record["trials"]]
    assert statuses[-1] == "oom" and set(statuses[:-1]) == {"ok"}, record["trials"]
    assert "OutOfMemoryError" in record["trials"][-1]["note"]
    assert record["batch_size"] < record["trials"][-1]["batch_size"]
    assert record["gpu_memory_mb"] > 0


@pytest.mark.parametrize("stage, settings, cap", [
    ("evaluate", {"timed_problems": 5}, 5),  # its curve times 5 of the 12 problems
    ("evaluate", {"timed_problems": 64, "limit": 7}, 7),
    ("self_consistency", {"limit": 4}, 12),  # 4 problems x 3 samples in flight
])
def test_the_probe_never_tries_more_than_the_stage_has_in_flight(stage_files, stage, settings,
                                                                 cap):
    work, found = autotune.stage_work(stage, str(stage_files / "model"),
                                      str(stage_files / "test.jsonl"), SETTINGS | settings,
                                      "base", seed=0)
    assert found == cap and len(work["sequences"]) == cap
    assert run_probe(table(steady(*range(1, 10))), BUDGET, found)["batch_size"] <= cap
