"""The plan of a workflow run, from its validated config alone: which runs each stage makes,
which the memory budget leaves out and why, what each job asks a scheduler for, and how
distilled students are named. A batch size `auto` is the one its probe chose (`autotune`): the
plan asks for it through `choice`, which the workflow answers once the probe has run.

`workflow/rules/common.smk` only wires this into rules, so the planning is unit-tested like
the rest of the library. A model's shape is known before anything is downloaded: the toy's
from the config, a local model's from its `config.json`, a hub model's from the `shape` its
catalogue entry declares (checked against the download).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from ..model.checkpoint import WEIGHTS, WEIGHTS_INDEX
from ..model.config import QWEN3_SHAPES, Qwen3Config
from ..engine.memory_model import CPU_WORKFLOW_JOB_MB, predict_peak_mb, predict_training_mb
from ..world.toy_tokenizer import QWEN3_SPECIAL_TOKENS
from .names import dataset_path, download_path, student_name
from .paths import (CurvePoint, GenerationRun, Pretraining, Probe, TimedTraining, ToyTokenizer,
                    TrainingRun)

GENERATION_STAGES = ("evaluate", "self_consistency")
TRAINING_STAGES = ("grpo", "distill")
# Prompt length the memory requests and the budget allow for (MATH-500 prompts are shorter).
PROMPT_TOKENS = 512
# Headroom of a job's memory request over the memory model's prediction, times its attempt.
REQUEST_HEADROOM = 1.5


class PlanError(ValueError):
    """A config that cannot be planned; the message names the key and how to fix it."""


STUDENT = re.compile(
    r"(?P<base>.+)-distilled-bs(?P<batch_size>\d+)-(?P<device>cpu|cuda|mps)(?:-ws(?P<world_size>\d+))?"
)


def paths(runs, stage: str, name: str) -> list[str]:
    return [run.path(stage, name) for run in runs]


# The fields of a shape that planning depends on (sizes, not e.g. the RoPE base or context).
SHAPE_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim", "intermediate_size", "tie_word_embeddings")


def has_train_split(dataset: dict) -> bool:
    """Whether a catalogue dataset has training problems: generated ones always do, a hub or
    local one where its entry names a `train` file."""
    return dataset["source"] == "arith" or "train" in dataset


def split_source(dataset: dict, split: str) -> dict:
    """Where a hub or local dataset's `split` (test, train) comes from: hub, its repo, file
    and revision (a train file's repo defaults to the entry's, its revision does not: another
    repo's revisions are its own); local, its path."""
    entry = dataset if split == "test" else dataset["train"]
    if dataset["source"] == "local":
        return {"path": entry["path"]}
    return {"repo_id": entry.get("repo_id", dataset["repo_id"]),
            "filename": entry.get("filename", "test.jsonl"),
            "revision": entry.get("revision")}


def declared_shape(shape: str | dict, key: str) -> Qwen3Config:
    """The architecture a catalogue entry declares: a known shape's name or config keys."""
    if isinstance(shape, str):
        return QWEN3_SHAPES[shape]
    return Qwen3Config.from_dict(shape, source=f"config: {key}")


def check_shape(model_dir: str | Path, shape: str | dict, key: str) -> None:
    """Refuse a downloaded model whose config.json differs from the shape its catalogue entry
    declared: the jobs were planned (memory requests, budget) for that shape."""
    found = Qwen3Config.from_file(Path(model_dir) / "config.json")
    expected = declared_shape(shape, key)
    wrong = [f"{field} {getattr(found, field)} (declared {getattr(expected, field)})"
             for field in SHAPE_FIELDS if getattr(found, field) != getattr(expected, field)]
    if wrong:
        raise PlanError(f"{model_dir}/config.json does not match config {key}: "
                        + ", ".join(wrong) + f"; set {key} to this model's architecture")


def missing_model_files(directory: Path) -> str:
    """What a local model directory lacks, or "" if nothing."""
    if not directory.is_dir():
        return "no such directory"
    missing = [f for f in ("config.json", "tokenizer.json") if not (directory / f).is_file()]
    if not (directory / WEIGHTS).is_file() and not (directory / WEIGHTS_INDEX).is_file():
        missing.append(f"weights ({WEIGHTS} or {WEIGHTS_INDEX})")
    return f"no {', '.join(missing)}" if missing else ""


class Plan:
    """Every decision the workflow makes from its config, before any job runs."""

    def __init__(self, config: dict, choice: Callable[[Probe], int | None] | None = None,
                 threads: int | None = None):
        """`threads`: what a timed job runs on (`--cores` may cap the config's `threads`)."""
        self.config = config
        self.root = config.get("results_dir", "results")
        self.choice = choice
        self.threads = min(threads or config["threads"], config["threads"])
        self.check()

    # --- checks -------------------------------------------------------------------------

    def check(self) -> None:
        """Errors that a schema cannot express, each naming its key."""
        config = self.config
        for stage in GENERATION_STAGES + TRAINING_STAGES:
            for key, catalogue in (("models", "models"), ("datasets", "datasets")):
                for name in config[stage][key]:
                    if catalogue == "models" and self.is_student(name):
                        continue
                    if name not in config[catalogue]:
                        raise PlanError(
                            f"config: {stage}.{key} names {name!r}, which is not in `{catalogue}` "
                            f"(known: {', '.join(sorted(config[catalogue]))})")
        grpo = config["grpo"]
        step_rollouts = grpo["problems_per_step"] * grpo["num_rollouts"]
        for ranks in grpo["world_sizes"]:
            if ranks > step_rollouts:
                raise PlanError(
                    f"config: grpo.world_sizes has {ranks}, more ranks than the {step_rollouts} "
                    "rollouts of a step (grpo.problems_per_step x grpo.num_rollouts): ranks would idle")
        step_examples = config["distill"]["examples_per_step"]
        for ranks in config["distill"]["world_sizes"]:
            if ranks > step_examples:
                raise PlanError(
                    f"config: distill.world_sizes has {ranks}, more ranks than the {step_examples} "
                    "examples of a step (distill.examples_per_step): ranks would idle")
        for name in grpo["datasets"]:
            if not has_train_split(config["datasets"][name]):
                raise PlanError(
                    f"config: grpo.datasets names {name!r}, which has no train split for GRPO's "
                    f"training problems: give datasets.{name} a `train` (source hub: a file of "
                    "a dataset repo, e.g. {repo_id: rasbt/math_full_minus_math500, filename: "
                    "...}; source local: {path: FILE})")
        if config["distill"]["teacher"]["source"] == "arith-traces":
            for name in config["distill"]["datasets"]:
                if config["datasets"][name]["source"] != "arith":
                    raise PlanError(
                        f"config: distill.datasets names {name!r}, which is not an arith dataset, "
                        "but distill.teacher.source arith-traces works arith problems: use "
                        "teacher source hub or local for it")
        for name, entry in config["models"].items():
            if entry["source"] == "hub" and "shape" not in entry:
                raise PlanError(
                    f"config: models.{name} (source hub) needs `shape`, the model's architecture: "
                    f"one of {sorted(QWEN3_SHAPES)} or a mapping of its config.json keys")
        self.check_local_files()

    def used(self, catalogue: str) -> list[str]:
        """The catalogue entries (`models`, `datasets`) some stage uses, a student's base model
        for the student."""
        stages = [self.config[stage] for stage in GENERATION_STAGES + TRAINING_STAGES]
        names = [name for cfg in stages for name in cfg[catalogue]]
        if catalogue == "models":
            names = [self.base_model(name) for name in
                     names + self.config["self_consistency"]["curve"]["models"]]
        return list(dict.fromkeys(names))

    def check_local_files(self) -> None:
        """Every file a used catalogue entry names on this machine, there before any job runs:
        Snakemake would otherwise take an old table for a source file ("Nothing to be done") or
        stop on a MissingInputException naming no config key."""
        for name in self.used("models"):
            entry = self.config["models"][name]
            if entry["source"] == "local":
                missing = missing_model_files(Path(entry["path"]))
                if missing:
                    raise PlanError(
                        f"config: models.{name}.path {entry['path']}: {missing}; a local model "
                        f"is a directory as a Hugging Face download holds it: config.json, "
                        f"tokenizer.json and {WEIGHTS} (or {WEIGHTS_INDEX} and its shards)")
        for name in self.used("datasets"):
            entry = self.config["datasets"][name]
            if entry["source"] != "local":
                continue
            splits = [("path", entry["path"])]
            if "train" in entry:
                splits.append(("train.path", entry["train"]["path"]))
            for key, path in splits:
                if not Path(path).is_file():
                    raise PlanError(f"config: datasets.{name}.{key} {path}: no such file; a "
                                    "local split is a JSON, JSON Lines or Parquet file of "
                                    "problems")
        teacher = self.config["distill"]["teacher"]
        if teacher["source"] == "local" and not Path(teacher["path"]).is_file():
            raise PlanError(f"config: distill.teacher.path {teacher['path']}: no such file; "
                            "a local teacher is a JSON list or JSON Lines of traces")

    # --- models ---------------------------------------------------------------------------

    def is_student(self, model: str) -> bool:
        """Whether `model` names a distilled student of a catalogue model (`student_name`)."""
        match = STUDENT.fullmatch(model)
        return bool(match) and match["base"] in self.config["models"]

    def base_model(self, model: str) -> str:
        """The catalogue model a (possibly distilled) model name comes from."""
        match = STUDENT.fullmatch(model)
        return match["base"] if match and match["base"] in self.config["models"] else model

    def model_dir(self, model: str, dataset: str, seed: int) -> str:
        """Where a model's checkpoint is: a distilled student's training output (it is
        evaluated on the dataset it learned), the toy pretrained with `seed`, a local directory,
        or the workflow's copy of a hub model (the last two are the same for every seed)."""
        match = STUDENT.fullmatch(model)
        if match and match["base"] in self.config["models"]:
            run = TrainingRun(seed, match["base"], dataset, int(match["batch_size"]),
                              match["device"], int(match["world_size"] or 1), root=self.root)
            return run.path("distill", "model")
        entry = self.config["models"][model]
        if entry["source"] == "toy":
            return Pretraining(seed, model, self.root).path("model")
        return entry["path"] if entry["source"] == "local" else download_path(model)

    def tokenizer_dir(self, model: str) -> str:
        """Where a model's tokenizer is: the toy's own job's output (one for every seed and
        every student), else the checkpoint's folder, which holds it."""
        base = self.base_model(model)
        if self.config["models"][base]["source"] == "toy":
            return ToyTokenizer(base, self.root).path()
        return self.model_dir(base, "", 0)

    def prompt_style(self, model: str) -> str:
        return self.config["models"][self.base_model(model)]["prompt_style"]

    def architecture(self, model: str) -> Qwen3Config:
        """A model's shape, known before it is built or downloaded."""
        base = self.base_model(model)
        entry = self.config["models"][base]
        if entry["source"] == "toy":
            toy = dict(self.config["toy"])
            toy["vocab_size"] += len(QWEN3_SPECIAL_TOKENS)
            return Qwen3Config(**toy)
        if entry["source"] == "local":
            return Qwen3Config.from_file(Path(entry["path"]) / "config.json")
        return declared_shape(entry["shape"], f"models.{base}.shape")

    def settings(self, stage: str) -> dict:
        """A stage's configured settings (`Settings.configured`): its rule's params."""
        from ..stages.distill import DistillSettings
        from ..stages.evaluate import EvaluationSettings
        from ..stages.grpo import GRPOSettings
        from ..stages.pretrain import PretrainSettings
        from ..stages.self_consistency import SamplingSettings

        kind = {"pretrain": PretrainSettings, "grpo": GRPOSettings, "distill": DistillSettings,
                "evaluate": EvaluationSettings, "self_consistency": SamplingSettings}
        return kind[stage].configured(self.config[stage])

    # --- batch sizes, `auto` among them ---------------------------------------------------------

    def probes(self) -> list[Probe]:
        """Every probe the config's `auto` batch sizes need."""
        return [Probe(seed, stage, model, dataset, device, self.root)
                for stage in GENERATION_STAGES + TRAINING_STAGES
                if "auto" in self.config[stage]["batch_sizes"]
                for seed in self.config["seeds"]
                for model in self.config[stage]["models"]
                for dataset in self.config[stage]["datasets"]
                for device in self.config[stage]["devices"]]

    def batch_sizes(self, stage: str, seed: int, model: str, dataset: str, device: str,
                    probed: bool = True, configured: list | None = None) -> list[int]:
        """A stage's batch sizes (`configured`, default its `batch_sizes`) for one model,
        dataset and device: `auto` as its probe chose (left out when `probed` is False, or
        while the probe has not run: `choice` gives None), each size once."""
        sizes = []
        for size in configured or self.config[stage]["batch_sizes"]:
            if size == "auto":
                if not probed:
                    continue
                if self.choice is None:
                    raise PlanError(f"config: {stage}.batch_sizes has auto, which needs its probe")
                size = self.choice(Probe(seed, stage, model, dataset, device, self.root))
            if size is not None and size not in sizes:
                sizes.append(size)
        return sizes

    def probe_paths(self, stage: str, seed: int, model: str, dataset: str,
                    device: str) -> list[str]:
        """The probe output a job of `stage` waits for when the stage has `auto` (none else)."""
        if "auto" not in self.config[stage]["batch_sizes"]:
            return []
        return [Probe(seed, stage, model, dataset, device, self.root).path()]

    def chosen(self, stage: str, run) -> bool:
        """Whether `run`'s batch size is the one its stage's probe chose."""
        return ("auto" in self.config[stage]["batch_sizes"] and self.choice is not None
                and run.batch_size == self.choice(Probe(run.seed, stage, run.model, run.dataset,
                                                        run.device, self.root)))

    # --- generation stages ------------------------------------------------------------------

    def requested(self, stage: str, probed: bool = True) -> list[GenerationRun]:
        """Every run a generation stage's config asks for. `sequential` is one sequence at a
        time whatever the batch size, so it runs once (size 1)."""
        cfg = self.config[stage]
        return [GenerationRun(seed, model, dataset, strategy, batch_size, device, self.root)
                for seed in self.config["seeds"]
                for model in cfg["models"] for dataset in cfg["datasets"]
                for device in cfg["devices"] for strategy in cfg["strategies"]
                for batch_size in ([1] if strategy == "sequential" else
                                   self.batch_sizes(stage, seed, model, dataset, device, probed))]

    def distinct_prompts(self, stage: str, batch_size: int) -> int:
        """The most distinct prompts one batch of a stage can hold. Self-consistency without
        early stop batches each problem's `num_samples` samples one after another, so `batch_size`
        consecutive samples span at most ceil((batch_size - 1) / num_samples) + 1 problems; with
        early stop, late rounds hold one sample per problem, so every prompt may differ."""
        cfg = self.config[stage]
        if stage != "self_consistency" or cfg["early_stop"]:
            return batch_size
        return min(batch_size, -(-(batch_size - 1) // cfg["num_samples"]) + 1)

    def predicted_generation_mb(self, stage: str, model: str, batch_size: int,
                                device: str) -> dict[str, float]:
        """The memory model's peak of a generation job (prompts of PROMPT_TOKENS), by part."""
        return predict_peak_mb(
            self.architecture(model), self.config["dtype"][device], batch_size, PROMPT_TOKENS,
            self.config[stage]["max_new_tokens"], device,
            CPU_WORKFLOW_JOB_MB if device == "cpu" else None,
            distinct_prompts=self.distinct_prompts(stage, batch_size),
            packed=device == "cpu")  # the job may pack (a timed choice): count it if it does

    def over_budget(self, stage: str, run: GenerationRun, probed: bool = True) -> float | None:
        """The predicted peak of a run if it exceeds its device's memory budget (a size its probe
        chose was measured to fit; `probed` False: not asked)."""
        budget = self.config["memory_budget_mb"][run.device]
        if budget is None or (probed and self.chosen(stage, run)):
            return None
        predicted = self.predicted_generation_mb(stage, run.model, run.batch_size,
                                                 run.device)["total"]
        return predicted if predicted > budget else None

    def generation_runs(self, stage: str) -> list[GenerationRun]:
        """The requested runs that fit the memory budget (all, without one)."""
        return [run for run in self.requested(stage) if self.over_budget(stage, run) is None]

    def skipped(self, stage: str) -> list[dict]:
        """Runs the memory budget left out, each with its prediction and the reason: a curve's
        points (`evaluate`, `self_consistency_curve`) with each of their strategies, or the
        vote's runs (`self_consistency`). Training stages have no budget."""
        curve = {"evaluate": "evaluate", "self_consistency_curve": "self_consistency"}
        if stage in curve:
            runs = [(point, strategy) for point in self.curve_points(curve[stage], probed=False)
                    for strategy in self.curve_strategies(curve[stage], point.batch_size)]
            stage = curve[stage]
        elif stage == "self_consistency":
            runs = [(run, run.strategy) for run in self.requested(stage, probed=False)]
        else:
            return []
        rows = []
        for run, strategy in runs:
            predicted = self.over_budget(stage, run, probed=False)
            if predicted is None:
                continue
            budget = self.config["memory_budget_mb"][run.device]
            rows.append({"seed": run.seed, "model": run.model, "dataset": run.dataset,
                         "strategy": strategy, "batch_size": run.batch_size, "device": run.device,
                         "dtype": self.config["dtype"][run.device],
                         "threads": getattr(run, "threads", None),
                         "predicted_mem_mb": round(predicted),
                         "note": f"skipped: predicted {predicted:.0f} MB > budget {budget:g} MB"})
        return rows

    # --- training stages --------------------------------------------------------------------

    def grpo_runs(self) -> list[TrainingRun]:
        cfg = self.config["grpo"]
        return [TrainingRun(seed, model, dataset, batch_size, device, world_size, strategy,
                            self.root)
                for seed in self.config["seeds"]
                for model in cfg["models"] for dataset in cfg["datasets"]
                for device in cfg["devices"] for strategy in cfg["strategies"]
                for batch_size in ([1] if strategy == "sequential" else
                                   self.batch_sizes("grpo", seed, model, dataset, device))
                for world_size in cfg["world_sizes"]]

    def distill_runs(self) -> list[TrainingRun]:
        cfg = self.config["distill"]
        return [TrainingRun(seed, model, dataset, batch_size, device, world_size, root=self.root)
                for seed in self.config["seeds"]
                for model in cfg["models"] for dataset in cfg["datasets"]
                for device in cfg["devices"]
                for batch_size in self.batch_sizes("distill", seed, model, dataset, device)
                for world_size in cfg["world_sizes"]]

    def student_evaluations(self) -> list[GenerationRun]:
        """Greedy evaluations of every student and of the model it started from, with the
        generation budget of the teacher's traces."""
        size = self.config["distill"]["eval_batch_size"]
        runs = set()
        for run in self.distill_runs():
            for name in (run.model, student_name(run.model, run.batch_size, run.device,
                                                 run.world_size)):
                runs.add(GenerationRun(run.seed, name, run.dataset, "batched_stop", size,
                                       run.device, self.root))
        return sorted(runs, key=lambda r: (r.seed, r.model, r.dataset, r.device))

    # --- the batching curves ----------------------------------------------------------------

    def curve_setting(self, stage: str) -> dict:
        """A stage's curve: its models, strategies and batch sizes, and how many problems each
        point times (evaluation: the stage's own keys; self-consistency: its `curve`)."""
        cfg = self.config[stage]
        if stage == "evaluate":
            return {"models": cfg["models"], "strategies": cfg["strategies"],
                    "batch_sizes": cfg["batch_sizes"], "problems": cfg["timed_problems"]}
        return cfg["curve"]

    def curve_strategies(self, stage: str, batch_size: int) -> list[str]:
        """The strategies a point times: `sequential` (one at a time) only at size 1, and only
        it there unless size 1 is configured."""
        setting = self.curve_setting(stage)
        if batch_size == 1 and 1 not in setting["batch_sizes"]:
            return ["sequential"]
        return [s for s in setting["strategies"] if s != "sequential" or batch_size == 1]

    def curve_points(self, stage: str, probed: bool = True) -> list[CurvePoint]:
        """Every point of a stage's curve (a size `auto` chose among them), within the memory
        budget where `probed`. A curve with `sequential` always has a point at size 1."""
        setting, cfg = self.curve_setting(stage), self.config[stage]
        points = []
        for seed in self.config["seeds"]:
            for model in setting["models"]:
                for dataset in cfg["datasets"]:
                    for device in cfg["devices"]:
                        sizes = self.batch_sizes(stage, seed, model, dataset, device, probed,
                                                 setting["batch_sizes"])
                        if "sequential" in setting["strategies"] and 1 not in sizes:
                            sizes = [1, *sizes]
                        points += [CurvePoint(seed, stage, model, dataset, size, device,
                                              self.threads, self.root) for size in sorted(sizes)]
        return [p for p in points if not probed or self.over_budget(stage, p) is None]

    def curve_settings(self, stage: str, batch_size: int) -> dict:
        """A curve point's settings from the config (`stages.timing.TimingSettings` less the
        job's own): the strategies it times, the stage's timed workload, and `timing`. Its
        answers are drawn as the stage draws them: greedy, one per problem (evaluation), or the
        stage's samples per problem (self-consistency)."""
        cfg = self.config[stage]
        drawn = ({"num_samples": 1, "temperature": 0.0, "top_p": 1.0, "prompt_suffix": ""}
                 if stage == "evaluate" else
                 {key: cfg[key] for key in ("num_samples", "temperature", "top_p",
                                            "prompt_suffix")})
        return {"strategies": self.curve_strategies(stage, batch_size),
                "problems": self.curve_setting(stage)["problems"],
                "max_new_tokens": cfg["max_new_tokens"], "timing": self.config["timing"]} | drawn

    def curve_inputs(self, stage: str) -> dict[str, list[str]]:
        points = self.curve_points(stage)
        return {"points": [p.path("metrics.json") for p in points],
                "point_records": [p.path("records.jsonl") for p in points],
                "point_problems": [dataset_path(p.dataset) for p in points]}

    def accuracy_runs(self) -> list[GenerationRun]:
        """Evaluation's greedy run over the whole split, once per model, dataset and device:
        every strategy and batch size gives its tokens (the curve checks that on its
        problems), so accuracy needs one run."""
        cfg = self.config["evaluate"]
        return [GenerationRun(seed, model, dataset, "batched_stop", cfg["accuracy_batch_size"],
                              device, self.root)
                for seed in self.config["seeds"] for model in cfg["models"]
                for dataset in cfg["datasets"] for device in cfg["devices"]]

    # --- Appendix E: each workload one at a time against batched -----------------------------

    def timed_trainings(self) -> list[TimedTraining]:
        """The timings of GRPO's and distillation's first steps, per model, dataset and device
        their stage trains."""
        return [TimedTraining(seed, stage, model, dataset, device, self.threads, self.root)
                for stage in TRAINING_STAGES for seed in self.config["seeds"]
                for model in self.config[stage]["models"]
                for dataset in self.config[stage]["datasets"]
                for device in self.config[stage]["devices"]]

    def timed_settings(self, stage: str, seed: int, model: str, dataset: str,
                       device: str) -> list:
        """What a training timing sets against one at a time: GRPO's (strategy, batch size)
        pairs, distillation's batch sizes; the stage's own, a size `auto` chose included."""
        sizes = self.batch_sizes(stage, seed, model, dataset, device)
        if stage == "grpo":
            return [[strategy, size] for strategy in self.config[stage]["strategies"]
                    if strategy != "sequential" for size in sizes]
        return [size for size in sizes if size != 1]

    def configured_settings(self) -> dict[str, list]:
        """Per workload, the batched (strategy, batch size) its stage runs, which Appendix E's
        table uses where no batch size is clearly fastest (evaluation: its accuracy run)."""
        def first_size(stage: str):
            return next((size for size in self.config[stage]["batch_sizes"]
                         if size not in ("auto", 1)), None)

        rollouts = [s for s in self.config["grpo"]["strategies"] if s != "sequential"]
        return {"evaluate": ["batched_stop", self.config["evaluate"]["accuracy_batch_size"]],
                "self_consistency": [self.config["self_consistency"]["strategies"][0],
                                     first_size("self_consistency")],
                "grpo": [rollouts[0] if rollouts else None, first_size("grpo")],
                "distill": ["batched", first_size("distill")]}

    def appendix_inputs(self) -> dict[str, list[str]]:
        """Appendix E's table: both curves' points and the training timings."""
        evaluate, sampled = self.curve_inputs("evaluate"), self.curve_inputs("self_consistency")
        return {"evaluate": evaluate["points"], "evaluate_records": evaluate["point_records"],
                "self_consistency": sampled["points"],
                "self_consistency_records": sampled["point_records"],
                "training": [t.path("metrics.json") for t in self.timed_trainings()],
                "autotune": [p.path() for p in self.probes()]}

    # --- the tables ------------------------------------------------------------------------------

    def table_inputs(self, stage: str) -> dict[str, list[str]]:
        """The files a stage's table joins: its runs' outputs (distillation: also the
        evaluations of every student and its base) and its probes' choices."""
        if stage == "grpo":
            runs = self.grpo_runs()
            found = {"metrics": paths(runs, "grpo", "metrics.json"),
                     "logs": paths(runs, "grpo", "log.csv")}
        elif stage == "distill":
            runs, evaluations = self.distill_runs(), self.student_evaluations()
            found = {"metrics": paths(runs, "distill", "metrics.json"),
                     "logs": paths(runs, "distill", "log.csv"),
                     "evaluations": paths(evaluations, "evaluate", "metrics.json"),
                     "evaluation_records": paths(evaluations, "evaluate", "records.jsonl")}
        elif stage == "evaluate":
            runs = self.accuracy_runs()
            found = {"metrics": paths(runs, stage, "metrics.json"),
                     "records": paths(runs, stage, "records.jsonl")} | self.curve_inputs(stage)
        elif stage in ("self_consistency_curve", "workload"):
            found = self.curve_inputs("self_consistency" if stage != "workload" else "evaluate")
            stage = "self_consistency" if stage != "workload" else "evaluate"
        else:
            runs = self.generation_runs(stage)
            found = {"metrics": paths(runs, stage, "metrics.json"),
                     "records": paths(runs, stage, "records.jsonl")}
        return found | {"autotune": [p.path() for p in self.probes() if p.stage == stage]}

    # --- what a job asks a scheduler for ----------------------------------------------------

    def generation_resources(self, stage: str, model: str, batch_size: int, device: str,
                             attempt: int = 1, measured_mb: float | None = None) -> dict[str, int]:
        """Host memory (`mem_mb`) and GPUs of a generation job, more memory on each retry.

        On a GPU the model's tensors live in GPU memory; the host process holds its runtime and
        one copy of the weights while it loads them (`load_model` reads them on the CPU first).
        On CPU a peak its probe measured at this size counts where it exceeds the prediction.
        """
        parts = self.predicted_generation_mb(stage, model, batch_size, device)
        host = parts["total"] if device == "cpu" else CPU_WORKFLOW_JOB_MB + parts["weights"]
        if device == "cpu" and measured_mb is not None:
            host = max(host, measured_mb)
        return {"mem_mb": int(attempt * REQUEST_HEADROOM * host),
                "gpu": 1 if device == "cuda" else 0}

    def training_resources(self, stage: str, run: TrainingRun, attempt: int = 1,
                           measured_mb: float | None = None) -> dict[str, int]:
        """Memory, GPUs and CPUs of a training job: its ranks run in one task (torchrun forks
        them), each with `threads` CPUs, its own GPU on CUDA, and one rank's memory (on CPU at
        least the peak its probe measured at this size, `measured_mb`)."""
        cfg = self.config[stage]
        sequence = PROMPT_TOKENS + cfg.get("max_new_tokens", 0) if stage == "grpo" else cfg["max_seq_len"]
        if stage == "distill":  # a rank runs batch_size examples at a time
            per_rank_rows = run.batch_size
        else:  # a rank scores its share of the step's rollouts in one pass
            per_rank_rows = -(-cfg["num_rollouts"] * cfg["problems_per_step"] // run.world_size)
        parts = predict_training_mb(self.architecture(run.model), self.config["dtype"][run.device],
                                    per_rank_rows, sequence, run.device)
        host = parts["total"] if run.device == "cpu" else CPU_WORKFLOW_JOB_MB + parts["weights"]
        if run.device == "cpu" and measured_mb is not None:
            host = max(host, measured_mb)
        gpus = run.world_size if run.device == "cuda" else 0
        return {"mem_mb": int(attempt * REQUEST_HEADROOM * host * run.world_size), "gpu": gpus,
                "cpus_per_task": self.config["threads"] * run.world_size}
