"""The plan of a run, from the config alone: runs, skips, scheduler requests, students, shapes."""

import copy
import json
from pathlib import Path

import pytest
import yaml

from batched_reasoning.model.config import QWEN3_SHAPES, Qwen3Config
from batched_reasoning.workflow.plan import (
    GenerationRun,
    Plan,
    PlanError,
    TrainingRun,
    check_shape,
    split_source,
    student_name,
)
from batched_reasoning.world.toy_tokenizer import QWEN3_SPECIAL_TOKENS

REPO = Path(__file__).resolve().parents[1]
DEFAULTS = yaml.safe_load((REPO / "config.yaml").read_text())


def plan_of(**changes) -> Plan:
    config = copy.deepcopy(DEFAULTS)
    for dotted, value in changes.items():
        *parents, key = dotted.split("__")
        node = config
        for parent in parents:
            node = node[parent]
        node[key] = value
    return Plan(config)


def test_sequential_runs_once_and_every_other_strategy_at_every_batch_size():
    plan = plan_of(evaluate__batch_sizes=[1, 4, 16])
    points = plan.curve_points("evaluate")
    assert [p.batch_size for p in points] == [1, 4, 16]
    assert plan.curve_strategies("evaluate", 1) == ["sequential", "batched", "batched_stop",
                                                    "continuous"]
    assert plan.curve_strategies("evaluate", 4) == ["batched", "batched_stop", "continuous"]
    assert points[0].path("metrics.json") == \
        "results/seed0/curve/evaluate/toy-distilled-bs8-cpu/arith/bs1/cpu/t2/metrics.json"
    # size 1 not listed: only the one-at-a-time baseline runs there
    plan = plan_of(evaluate__batch_sizes=[4, 16])
    assert [p.batch_size for p in plan.curve_points("evaluate")] == [1, 4, 16]
    assert plan.curve_strategies("evaluate", 1) == ["sequential"]
    # accuracy: one greedy run over the whole split per model
    assert plan.accuracy_runs() == [
        GenerationRun(0, "toy-distilled-bs8-cpu", "arith", "batched_stop", 64, "cpu")]


def test_appendix_e_times_each_training_stage_one_at_a_time_against_its_own_settings():
    plan = plan_of(grpo__strategies=["sequential", "batched_stop", "continuous"],
                   grpo__batch_sizes=[4, 8], distill__batch_sizes=[1, 8])
    timed = plan.timed_trainings()
    assert [(t.stage, t.model, t.dataset, t.device, t.threads) for t in timed] == [
        ("grpo", "toy", "arith", "cpu", 2), ("distill", "toy", "arith", "cpu", 2)]
    assert timed[0].path("metrics.json") == \
        "results/seed0/timed_training/grpo/toy/arith/cpu/t2/metrics.json"
    # one at a time is the stage's own baseline: never listed among the batched settings
    assert plan.timed_settings("grpo", 0, "toy", "arith", "cpu") == [
        ["batched_stop", 4], ["batched_stop", 8], ["continuous", 4], ["continuous", 8]]
    assert plan.timed_settings("distill", 0, "toy", "arith", "cpu") == [8]
    assert plan.configured_settings() == {
        "evaluate": ["batched_stop", 64], "self_consistency": ["continuous", 64],
        "grpo": ["batched_stop", 4], "distill": ["batched", 8]}
    inputs = plan.appendix_inputs()
    assert inputs["training"] == [t.path("metrics.json") for t in timed]
    assert inputs["evaluate"] == plan.curve_inputs("evaluate")["points"]


def test_the_thread_count_a_job_gets_is_part_of_its_curve_point():
    """`--cores 1` caps the config's 2 threads: those timings are other points, never mixed
    with the 2-thread ones (the workflow passes `--cores` as `threads`)."""
    capped, full = Plan(copy.deepcopy(DEFAULTS), threads=1), Plan(copy.deepcopy(DEFAULTS))
    assert {p.threads for p in capped.curve_points("evaluate")} == {1}
    assert {p.threads for p in full.curve_points("evaluate")} == {2}
    assert not set(capped.table_inputs("evaluate")["points"]) & set(
        full.table_inputs("evaluate")["points"])
    assert Plan(copy.deepcopy(DEFAULTS), threads=8).threads == 2  # never more than configured


def test_every_seed_is_a_replicate_of_every_run_under_its_own_directory():
    plan = plan_of(seeds=[0, 3])
    one = plan_of(seeds=[0])
    runs = plan.generation_runs("self_consistency")
    assert len(runs) == 2 * len(one.generation_runs("self_consistency"))
    assert {run.seed for run in runs} == {0, 3}
    for stage in ("evaluate", "self_consistency"):
        points = plan.curve_points(stage)
        assert len(points) == 2 * len(one.curve_points(stage))
        assert {point.seed for point in points} == {0, 3}
    trained = plan.grpo_runs() + plan.distill_runs()
    assert len(trained) == 2 * len(one.grpo_runs() + one.distill_runs())
    assert all(run.path("grpo", "log.csv").startswith(f"results/seed{run.seed}/")
               for run in trained)
    students = plan.student_evaluations()
    assert {(run.seed, run.model) for run in students} == {
        (seed, model) for seed in (0, 3) for model in {run.model for run in one.student_evaluations()}}


def test_memory_budget_skips_the_runs_predicted_not_to_fit_and_says_why():
    unlimited = plan_of()
    predicted = {b: unlimited.predicted_generation_mb("evaluate", "toy", b, "cpu")["total"]
                 for b in (1, 4, 16)}
    assert predicted[1] < predicted[4] < predicted[16]
    budget = (predicted[4] + predicted[16]) / 2
    plan = plan_of(memory_budget_mb__cpu=budget, evaluate__batch_sizes=[1, 4, 16])
    skipped = plan.skipped("evaluate")
    assert {(row["strategy"], row["batch_size"]) for row in skipped} == {
        ("batched", 16), ("batched_stop", 16), ("continuous", 16)}
    assert all(f"> budget {budget:g} MB" in row["note"] for row in skipped)
    assert [p.batch_size for p in plan.curve_points("evaluate")] == [1, 4]
    assert unlimited.skipped("evaluate") == []


@pytest.mark.parametrize("changes, named", [
    ({"evaluate__models": ["gpt-5"]}, "evaluate.models names 'gpt-5'"),
    ({"grpo__world_sizes": [1, 64]}, "grpo.world_sizes has 64"),
    ({"distill__world_sizes": [16]}, "distill.world_sizes has 16"),
    # a hub dataset is a test split: GRPO would have no training problems
    ({"grpo__datasets": ["math500"]}, "grpo.datasets names 'math500', which has no train split"
                                      r".*give datasets.math500 a `train`"),
])
def test_config_errors_name_their_key(changes, named):
    with pytest.raises(PlanError, match=named):
        plan_of(**changes)


def test_a_train_split_comes_from_its_own_file_and_repo():
    hub = {"source": "hub", "repo_id": "HuggingFaceH4/MATH-500", "filename": "test.jsonl",
           "revision": "v1", "train": {"repo_id": "rasbt/math_full_minus_math500",
                                       "filename": "data/train.parquet"}}
    assert split_source(hub, "test") == {"repo_id": "HuggingFaceH4/MATH-500",
                                         "filename": "test.jsonl", "revision": "v1"}
    # another repo's revision is its own, never the test split's
    assert split_source(hub, "train") == {"repo_id": "rasbt/math_full_minus_math500",
                                          "filename": "data/train.parquet", "revision": None}
    local = {"source": "local", "path": "mine.json", "train": {"path": "train.json"}}
    assert split_source(local, "train") == {"path": "train.json"}
    config = copy.deepcopy(DEFAULTS)
    config["datasets"]["math500"]["train"] = hub["train"]
    config["grpo"]["datasets"] = ["math500"]
    assert Plan(config).grpo_runs()[0].dataset == "math500"


def test_results_dir_moves_every_output_of_a_configuration():
    config = copy.deepcopy(DEFAULTS) | {"results_dir": "results/other"}
    config["evaluate"]["batch_sizes"] = [1, "auto"]
    plan = Plan(config, choice=lambda probe: 4)
    paths = [p for stage in ("evaluate", "self_consistency", "grpo", "distill", "workload")
             for name, group in plan.table_inputs(stage).items() for p in group
             if name != "point_problems"]  # the datasets, shared by every configuration
    paths += [p for group in plan.appendix_inputs().values() for p in group]
    paths += [plan.model_dir("toy", "arith", 0), plan.model_dir("toy-distilled-bs8-cpu", "arith", 0)]
    paths += [plan.tokenizer_dir("toy"), plan.tokenizer_dir("toy-distilled-bs8-cpu")]
    paths += [probe.path() for probe in plan.probes()]
    assert len(paths) > 20
    assert all(p.startswith("results/other/") for p in paths), [
        p for p in paths if not p.startswith("results/other/")]


def test_a_hub_model_must_declare_its_shape():
    config = copy.deepcopy(DEFAULTS)
    del config["models"]["qwen3-0.6b-base"]["shape"]
    with pytest.raises(PlanError, match="models.qwen3-0.6b-base .*needs `shape`"):
        Plan(config)


def test_shapes_are_known_before_anything_is_built_or_downloaded(tmp_path):
    plan = plan_of()
    toy = plan.architecture("toy")
    assert toy.vocab_size == DEFAULTS["toy"]["vocab_size"] + len(QWEN3_SPECIAL_TOKENS)
    assert plan.architecture("qwen3-0.6b-base") == QWEN3_SHAPES["qwen3-0.6b"]
    assert plan.architecture(student_name("toy", 8, "cpu")) == toy  # a student keeps its shape
    local = tmp_path / "mine"
    local.mkdir()
    (local / "config.json").write_text(json.dumps(
        {"vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 64}))
    plan = plan_of(models__mine={"source": "local", "path": str(local), "prompt_style": "base"})
    assert plan.architecture("mine").head_dim == 8


def test_students_are_named_after_their_run_and_found_where_it_wrote_them():
    plan = plan_of()
    assert student_name("toy", 8, "cpu") == "toy-distilled-bs8-cpu"
    assert student_name("toy", 8, "cuda", 2) == "toy-distilled-bs8-cuda-ws2"
    assert plan.base_model("toy-distilled-bs8-cuda-ws2") == "toy"
    assert plan.model_dir("toy-distilled-bs8-cuda-ws2", "arith", 3) == \
        "results/seed3/distill/toy/arith/bs8/cuda/ws2/model"
    assert plan.model_dir("toy", "arith", 3) == "results/seed3/pretrain/toy/model"
    # a downloaded model is the same for every seed: one copy
    assert plan.model_dir("qwen3-0.6b-base", "arith", 3) == "resources/models/qwen3-0.6b-base"
    assert plan.prompt_style("qwen3-0.6b-reasoning") == "reasoning"
    evaluations = plan.student_evaluations()
    names = {run.model for run in evaluations}
    assert names == {"toy"} | {student_name("toy", b, "cpu") for b in DEFAULTS["distill"]["batch_sizes"]}
    assert {run.batch_size for run in evaluations} == {DEFAULTS["distill"]["eval_batch_size"]}


def test_generation_jobs_ask_host_memory_and_gpus_by_device():
    plan = plan_of()
    cpu = [plan.generation_resources("evaluate", "qwen3-0.6b-base", b, "cpu") for b in (1, 32)]
    cuda = [plan.generation_resources("evaluate", "qwen3-0.6b-base", b, "cuda") for b in (1, 32)]
    assert cpu[0]["mem_mb"] < cpu[1]["mem_mb"] and cpu[0]["gpu"] == 0
    # on a GPU the batch's KV cache and activations live in GPU memory, not in the host's
    assert cuda[0]["mem_mb"] == cuda[1]["mem_mb"] < cpu[0]["mem_mb"] and cuda[0]["gpu"] == 1
    weights_mb = 2 * (151_936 * 1024 + 28 * (1024 * 128 * 48 + 3 * 1024 * 3072)) / 2**20
    assert cuda[0]["mem_mb"] > 1.5 * weights_mb  # the host still loads the weights once
    retry = plan.generation_resources("evaluate", "qwen3-0.6b-base", 1, "cpu", attempt=2)
    assert retry["mem_mb"] == pytest.approx(2 * cpu[0]["mem_mb"], abs=1)


def test_training_jobs_ask_per_rank_memory_cpus_and_gpus():
    plan = plan_of(threads=3)
    one = plan.training_resources("distill", TrainingRun(0, "toy", "arith", 8, "cpu", 1))
    two = plan.training_resources("distill", TrainingRun(0, "toy", "arith", 8, "cpu", 2))
    assert one["cpus_per_task"] == 3 and two["cpus_per_task"] == 6
    assert one["gpu"] == two["gpu"] == 0
    assert two["mem_mb"] > one["mem_mb"]
    cuda = plan.training_resources("grpo", TrainingRun(0, "toy", "arith", 8, "cuda", 2, "batched_stop"))
    assert cuda["gpu"] == 2


def test_a_download_that_does_not_match_its_declared_shape_is_refused(tmp_path):
    shape = QWEN3_SHAPES["qwen3-0.6b"]
    (tmp_path / "config.json").write_text(json.dumps(shape.to_dict()))
    check_shape(tmp_path, "qwen3-0.6b", "models.base.shape")
    other = Qwen3Config(**{**shape.__dict__, "num_hidden_layers": 36})
    (tmp_path / "config.json").write_text(json.dumps(other.to_dict()))
    with pytest.raises(PlanError, match=r"models.base.shape: num_hidden_layers 36 \(declared 28\)"):
        check_shape(tmp_path, "qwen3-0.6b", "models.base.shape")


@pytest.mark.parametrize("batch_size, num_samples, early_stop, distinct", [
    (8, 4, False, 3),  # 8 consecutive samples span at most 3 problems of 4 samples
    (8, 8, False, 2),
    (1, 5, False, 1),
    (8, 4, True, 8),  # late rounds hold one sample per problem
])
def test_self_consistency_batches_are_predicted_from_their_distinct_prompts(
        batch_size, num_samples, early_stop, distinct):
    plan = plan_of(self_consistency__num_samples=num_samples,
                   self_consistency__early_stop=early_stop)
    assert plan.distinct_prompts("self_consistency", batch_size) == distinct
    assert plan.distinct_prompts("evaluate", batch_size) == batch_size
    if not early_stop:  # the bound is reached by some window of consecutive samples
        windows = [len({i // num_samples for i in range(start, start + batch_size)})
                   for start in range(4 * num_samples)]
        assert max(windows) == distinct


# --- batch_sizes: auto ------------------------------------------------------------------------

def auto_plan(choice=None, **changes) -> Plan:
    plan = plan_of(**changes)
    plan.choice = choice
    return plan


def test_auto_asks_one_probe_per_stage_model_dataset_device_and_seed():
    plan = auto_plan(seeds=[0, 1], evaluate__batch_sizes=[1, "auto"], distill__batch_sizes=["auto"])
    assert [p.path() for p in plan.probes()] == [
        f"results/autotune/seed{s}/{stage}/{model}/arith/cpu.json"
        for stage, model in (("evaluate", "toy-distilled-bs8-cpu"), ("distill", "toy"))
        for s in (0, 1)]
    assert auto_plan().probes() == []  # without auto nothing changes


def test_auto_runs_at_the_size_its_probe_chose_next_to_the_listed_sizes():
    asked = []

    def choice(probe):
        asked.append(probe)
        return {"evaluate": 8, "self_consistency": 16, "grpo": 4, "distill": 2}[probe.stage]

    plan = auto_plan(choice, evaluate__batch_sizes=[1, "auto"], evaluate__strategies=["batched"],
                     self_consistency__batch_sizes=["auto", 16], grpo__batch_sizes=["auto"],
                     distill__batch_sizes=["auto"])
    assert [p.batch_size for p in plan.curve_points("evaluate")] == [1, 8]
    assert [r.batch_size for r in plan.generation_runs("self_consistency")] == [16]  # once
    assert [r.batch_size for r in plan.grpo_runs()] == [4]
    assert {r.model for r in plan.student_evaluations()} == {"toy", "toy-distilled-bs2-cpu"}
    inputs = plan.table_inputs("distill")
    assert inputs["autotune"] == ["results/autotune/seed0/distill/toy/arith/cpu.json"]
    assert inputs["metrics"] == ["results/seed0/distill/toy/arith/bs2/cpu/ws1/metrics.json"]
    assert {p.stage for p in asked} == {"evaluate", "self_consistency", "grpo", "distill"}


def test_a_size_the_probe_chose_is_never_skipped_by_the_prediction():
    predicted = plan_of().predicted_generation_mb("evaluate", "toy", 64, "cpu")["total"]
    plan = auto_plan(lambda probe: 64, evaluate__batch_sizes=["auto", 32],
                     evaluate__strategies=["batched"], memory_budget_mb__cpu=predicted / 2)
    assert [p.batch_size for p in plan.curve_points("evaluate")] == [64]  # 32 skipped
    # the skip table is known before any probe has run, and names only listed sizes
    unprobed = auto_plan(None, evaluate__batch_sizes=["auto", 32],
                         evaluate__strategies=["batched"], memory_budget_mb__cpu=predicted / 2)
    assert [row["batch_size"] for row in unprobed.skipped("evaluate")] == [32]
    with pytest.raises(PlanError, match="evaluate.batch_sizes has auto"):
        unprobed.curve_points("evaluate")


def test_jobs_ask_at_least_what_their_probe_measured():
    plan = plan_of()
    predicted = plan.generation_resources("evaluate", "toy", 8, "cpu")["mem_mb"]
    measured = plan.generation_resources("evaluate", "toy", 8, "cpu", measured_mb=10 * predicted)
    assert measured["mem_mb"] > 9 * predicted
    run = TrainingRun(0, "toy", "arith", 8, "cpu", 1)
    trained = plan.training_resources("distill", run)["mem_mb"]
    assert plan.training_resources("distill", run, measured_mb=10 * trained)["mem_mb"] > 9 * trained


@pytest.mark.parametrize("stage, given", [
    ("pretrain", {"seed": 0, "threads": 1}),
    ("grpo", {"seed": 0, "threads": 1, "strategy": "batched", "batch_size": 4, "device": "cpu",
              "dtype": "float32", "compile": "off", "prompt_style": "base"}),
    ("distill", {"seed": 0, "threads": 1, "batch_size": 4, "device": "cpu", "dtype": "float32",
                 "prompt_style": "base"}),
    ("evaluate", {"threads": 1, "strategy": "batched", "batch_size": 4, "device": "cpu",
                  "dtype": "float32", "compile": "off", "prompt_style": "base"}),
    ("self_consistency", {"seed": 0, "threads": 1, "strategy": "batched", "batch_size": 4,
                          "device": "cpu", "dtype": "float32", "compile": "off",
                          "prompt_style": "base"}),
])
def test_a_stage_is_told_every_setting_its_config_holds_and_nothing_else(stage, given):
    """The rule's params are the settings the stage's config section holds; with what the job
    itself knows (wildcards, threads, the device's dtype) they make the whole settings object."""
    from batched_reasoning.stages.distill import DistillSettings
    from batched_reasoning.stages.evaluate import EvaluationSettings
    from batched_reasoning.stages.grpo import GRPOSettings
    from batched_reasoning.stages.pretrain import PretrainSettings
    from batched_reasoning.stages.self_consistency import SamplingSettings

    kind = {"pretrain": PretrainSettings, "grpo": GRPOSettings, "distill": DistillSettings,
            "evaluate": EvaluationSettings, "self_consistency": SamplingSettings}[stage]
    config = copy.deepcopy(DEFAULTS)
    config[stage]["not_a_setting"] = 1  # e.g. batch_sizes, strategies: they name runs
    params = Plan(config).settings(stage)
    assert "not_a_setting" not in params and set(params) <= set(config[stage])
    settings = kind.from_params(params | given)
    assert {name: getattr(settings, name) for name in params} == params


@pytest.mark.parametrize("stage", ["evaluate", "self_consistency"])
def test_a_curve_point_is_told_its_whole_timed_workload(stage):
    """With what the job knows (its wildcards, threads, the device's dtype and decode mode),
    a point's params make the whole settings object; its answers are drawn as its stage's."""
    from batched_reasoning.stages.timing import TimingSettings

    config = copy.deepcopy(DEFAULTS)
    config["timing"]["maximum_repeats"] = 5
    plan = Plan(config)
    settings = TimingSettings.from_params(
        plan.curve_settings(stage, 4), batch_size=4, device="cpu", dtype="float32",
        compile="off", prompt_style="base", threads=1, seed=0)
    assert settings.strategies == plan.curve_strategies(stage, 4)
    assert settings.timing["maximum_repeats"] == 5
    assert settings.max_new_tokens == config[stage]["max_new_tokens"]
    drawn = (settings.num_samples, settings.temperature)
    if stage == "evaluate":
        assert drawn == (1, 0.0) and settings.problems == config[stage]["timed_problems"]
    else:
        sampling = config[stage]
        assert drawn == (sampling["num_samples"], sampling["temperature"])
        assert settings.problems == sampling["curve"]["problems"]
