"""What each rule asks of the plan, as functions of a job's wildcards: its inputs, a few
params, and what it asks a scheduler for. `workflow/rules/common.smk` binds them to the rules;
here they are plain Python, tested with the rest of the plan."""

from __future__ import annotations

import re
from pathlib import Path

from .autotune import measured_peak_mb
from .names import dataset_path, teacher_path
from .plan import Plan, TrainingRun


def alternation(names: list[str]) -> str:
    """A wildcard regex matching exactly these names (or nothing)."""
    return "|".join(re.escape(n) for n in names) or "(?!)"


class Wiring:
    """Input functions, params and resources of the rules, from one `Plan`."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.config = plan.config

    def names_of(self, source: str, catalogue: str) -> str:
        """A wildcard regex of the `catalogue` entries (models, datasets) from `source`."""
        return alternation([name for name, entry in self.config[catalogue].items()
                            if entry["source"] == source])

    # --- inputs -----------------------------------------------------------------------------

    def model_input(self, w) -> str:
        return self.plan.model_dir(w.model, w.dataset, int(w.seed))

    def tokenizer_input(self, w) -> str:
        return self.plan.tokenizer_dir(w.model)

    def dataset_file(self, w) -> str:
        return dataset_path(w.dataset)

    def teacher_input(self, w) -> dict:
        """What the teacher file of `dataset` is made from (config `distill.teacher.source`)."""
        teacher = self.config["distill"]["teacher"]
        if teacher["source"] == "arith-traces":  # an arith dataset's (`Plan.check`)
            return {"train": dataset_path(w.dataset, "train")}
        return {"source": teacher["path"]} if teacher["source"] == "local" else {}

    def autotune_input(self, w) -> dict:
        """A probe's model and the stage's own problems (GRPO: its training problems;
        distillation: the teacher's traces)."""
        records = {"grpo": dataset_path(w.dataset, "train"),
                   "distill": teacher_path(w.dataset)}.get(w.stage)
        return {"model": self.model_input(w), "records": records or dataset_path(w.dataset)}

    def probe_outputs(self, w) -> list[str]:
        """The probe whose choice a training timing sets against (`auto`): it runs first."""
        return self.plan.probe_paths(w.stage, int(w.seed), w.model, w.dataset, w.device)

    def table_inputs(self, stage: str):
        """A stage table's inputs: runs at a size `auto` chose are known once its probe ran."""
        return lambda w: self.plan.table_inputs(stage)

    # --- params -----------------------------------------------------------------------------

    def prompt_style_of(self, w) -> str:
        return self.plan.prompt_style(w.model)

    def model_entry_of(self, w) -> str:
        """The catalogue entry a job's model comes from, for its errors to name."""
        base = self.plan.base_model(w.model)
        entry = self.config["models"][base]
        where = {"local": f"path {entry.get('path')}", "hub": f"repo {entry.get('repo_id')}",
                 "toy": "built by the workflow"}[entry["source"]]
        student = "" if base == w.model else f"; {w.model} is distilled from it"
        return f"config models.{base} (source {entry['source']}, {where}{student})"

    def seed_of(self, w) -> int:
        return int(w.seed)

    def dtype_of(self, w) -> str:
        return self.config["dtype"][w.device]

    def compile_of(self, w) -> str:
        return self.config["compile"][w.device]

    def stage_compile_of(self, w) -> str | None:
        """The decode mode of a job whose stage is a wildcard (a timing, a probe): None for
        distillation, which generates nothing."""
        return None if w.stage == "distill" else self.compile_of(w)

    # --- resources --------------------------------------------------------------------------

    def partition(self) -> dict:
        """A SLURM partition per device where the config names one (`slurm_partition`);
        without any, none, so `--default-resources slurm_partition=...` applies to all jobs."""
        partitions = self.config["slurm_partition"]
        if not any(partitions.values()):
            return {}
        return {"slurm_partition": lambda w: partitions[w.device] or ""}

    def probed_peak_mb(self, stage: str, w) -> float | None:
        """The peak the stage's probe measured at this batch size, where `auto` ran one."""
        paths = self.plan.probe_paths(stage, int(w.seed), w.model, w.dataset, w.device)
        if not paths or not Path(paths[0]).exists():
            return None
        return measured_peak_mb(paths[0], int(w.batch_size))

    def generation_resource(self, stage: str, key: str):
        def value(w, attempt):
            return self.plan.generation_resources(
                stage, w.model, int(w.batch_size), w.device, attempt,
                self.probed_peak_mb(stage, w))[key]
        return value

    def training_resource(self, stage: str, key: str):
        def value(w, attempt):
            run = TrainingRun(int(w.seed), w.model, w.dataset, int(w.batch_size), w.device,
                              int(w.world_size), w.get("strategy"))
            return self.plan.training_resources(stage, run, attempt,
                                                self.probed_peak_mb(stage, w))[key]
        return value

    def curve_resource(self, key: str):
        """Memory and GPUs of a curve point's job, as for its stage's generation jobs."""
        return lambda w, attempt: self.generation_resource(w.stage, key)(w, attempt)

    def timed_training_resource(self, key: str):
        """Memory and GPUs of a training timing: as for its stage's run at the largest batch
        size it times."""
        def value(w, attempt):
            settings = self.plan.timed_settings(w.stage, int(w.seed), w.model, w.dataset, w.device)
            sizes = [s[1] if isinstance(s, list) else s for s in settings] or [1]
            run = TrainingRun(int(w.seed), w.model, w.dataset, max(sizes), w.device, 1)
            return self.plan.training_resources(w.stage, run, attempt)[key]
        return value

    def autotune_memory(self, w, attempt) -> int:
        """What a probe asks a scheduler for: the configured budget, else the memory model's
        prediction for a batch of 64 (its trials then keep under what the job was given)."""
        budget = self.config["memory_budget_mb"][w.device]
        if budget is not None:
            return int(budget)
        if w.stage in ("grpo", "distill"):
            run = TrainingRun(int(w.seed), w.model, w.dataset, 64, w.device, 1)
            return self.plan.training_resources(w.stage, run, attempt)["mem_mb"]
        return self.plan.generation_resources(w.stage, w.model, 64, w.device, attempt)["mem_mb"]
