import re
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from batched_reasoning.workflow.autotune import chosen_batch_size, measured_peak_mb
from batched_reasoning.workflow.plan import (
    Plan,
    PlanError,
    Probe,
    TrainingRun,
    split_source,
)
from batched_reasoning.core.provenance import script_code_hash

if "seed" in config:
    raise WorkflowError(
        "config: `seed` is now `seeds`, a list of replicates, each under results/seed<N>/; "
        f"write seeds: [{config['seed']}] (or --config seeds=[{config['seed']}])"
    )
# `--config seeds=[0,1]` arrives as a list of strings
config["seeds"] = [int(s) if str(s).isdigit() else s for s in config.get("seeds", [0])]
validate(config, "../schemas/config.schema.yaml")
# where this configuration's results go: a configuration of its own keeps them apart
RESULTS = config["results_dir"]


def out(path):
    """`path` under this configuration's results folder."""
    return f"{RESULTS}/{path}"


def chosen_size(probe):
    """The batch size `probe` chose (`auto`): Snakemake runs the probe first, a checkpoint."""
    return chosen_batch_size(checkpoints.autotune.get(**probe.wildcards()).output.json)


# Threads a timed job gets: the config's, or fewer where `--cores` allows fewer. They are part of
# a curve point's path, so a run at another `--cores` times new points instead of mixing its
# timings into the old ones.
CORES = workflow._cores
THREADS = min(config["threads"], CORES) if isinstance(CORES, int) else config["threads"]

try:
    # what runs, what is skipped and why, what each job asks for
    PLAN = Plan(config, choice=chosen_size, threads=THREADS)
except PlanError as error:
    raise WorkflowError(str(error)) from None

EVAL = config["evaluate"]
SC = config["self_consistency"]
GRPO = config["grpo"]
DISTILL = config["distill"]

# Library code behind each script: editing a module's code reruns exactly the jobs whose script
# imports it, directly or not (comments, docstrings and layout do not count).
CODE = {
    script.stem: script_code_hash(script)
    for script in Path(workflow.basedir, "workflow", "scripts").glob("*.py")
}


wildcard_constraints:
    seed=r"[0-9]+",
    model=r"[A-Za-z0-9][A-Za-z0-9._-]*",
    dataset=r"[A-Za-z0-9][A-Za-z0-9._-]*",
    strategy=r"sequential|batched|batched_stop|continuous",
    stage=r"evaluate|self_consistency|grpo|distill",
    threads=r"[1-9][0-9]*",
    batch_size=r"[1-9][0-9]*",
    device=r"cpu|cuda|mps",
    world_size=r"[1-9][0-9]*",


def names_of(source, catalogue):
    return [
        name for name, entry in config[catalogue].items() if entry["source"] == source
    ]


def alternation(names):
    """A wildcard regex matching exactly these names (or nothing)."""
    return "|".join(re.escape(n) for n in names) or "(?!)"


def model_input(wildcards):
    return PLAN.model_dir(wildcards.model, wildcards.dataset, int(wildcards.seed))


def prompt_style_of(wildcards):
    return PLAN.prompt_style(wildcards.model)


def dataset_file(wildcards):
    return f"resources/data/{wildcards.dataset}/test.jsonl"


def seed_of(wildcards):
    return int(wildcards.seed)


def dtype_of(wildcards):
    return config["dtype"][wildcards.device]


def compile_of(wildcards):
    return config["compile"][wildcards.device]


def probed_peak_mb(stage, wildcards):
    """The peak the stage's probe measured at this batch size, where `auto` ran one."""
    if "auto" not in config[stage]["batch_sizes"]:
        return None
    probe = Probe(
        int(wildcards.seed),
        stage,
        wildcards.model,
        wildcards.dataset,
        wildcards.device,
        RESULTS,
    )
    if not Path(probe.path()).exists():
        return None
    return measured_peak_mb(probe.path(), int(wildcards.batch_size))


def generation_resource(stage, key):
    def value(wildcards, attempt):
        resources = PLAN.generation_resources(
            stage,
            wildcards.model,
            int(wildcards.batch_size),
            wildcards.device,
            attempt,
            probed_peak_mb(stage, wildcards),
        )
        return resources[key]

    return value


def training_resource(stage, key):
    def value(wildcards, attempt):
        run = TrainingRun(
            int(wildcards.seed),
            wildcards.model,
            wildcards.dataset,
            int(wildcards.batch_size),
            wildcards.device,
            int(wildcards.world_size),
            wildcards.get("strategy"),
        )
        return PLAN.training_resources(
            stage, run, attempt, probed_peak_mb(stage, wildcards)
        )[key]

    return value


# A SLURM partition per device where the config names one (`slurm_partition`); without any, the
# resource is left out, so `--default-resources slurm_partition=...` still applies to all jobs.
PARTITION = (
    {"slurm_partition": lambda w: config["slurm_partition"][w.device] or ""}
    if any(config["slurm_partition"].values())
    else {}
)


def teacher_input(wildcards):
    """What the teacher file of `dataset` is made from (config `distill.teacher.source`)."""
    teacher = DISTILL["teacher"]
    if teacher["source"] == "arith-traces":
        if config["datasets"][wildcards.dataset]["source"] != "arith":
            raise WorkflowError(
                f"distill.teacher.source arith-traces needs an arith dataset; {wildcards.dataset!r} "
                "is not one: use teacher source hub or local for it"
            )
        return {"train": f"resources/data/{wildcards.dataset}/train.jsonl"}
    if teacher["source"] == "local":
        return {"source": teacher["path"]}
    return {}


def autotune_input(wildcards):
    """A probe's model and the stage's own problems (GRPO: its training problems;
    distillation: the teacher's traces)."""
    records = {
        "grpo": f"resources/data/{wildcards.dataset}/train.jsonl",
        "distill": f"resources/teacher/{wildcards.dataset}.json",
    }.get(wildcards.stage, dataset_file(wildcards))
    return {"model": model_input(wildcards), "records": records}


def autotune_memory(wildcards, attempt):
    """What a probe asks a scheduler for: the configured budget, else the memory model's
    prediction for a batch of 64 (its trials then keep under what the job was given)."""
    budget = config["memory_budget_mb"][wildcards.device]
    if budget is not None:
        return int(budget)
    if wildcards.stage in ("grpo", "distill"):
        run = TrainingRun(
            int(wildcards.seed),
            wildcards.model,
            wildcards.dataset,
            64,
            wildcards.device,
            1,
        )
        return PLAN.training_resources(wildcards.stage, run, attempt)["mem_mb"]
    return PLAN.generation_resources(
        wildcards.stage, wildcards.model, 64, wildcards.device, attempt
    )["mem_mb"]


def table_inputs(stage):
    """A stage table's inputs as an input function: runs at a size `auto` chose are known once
    its probe has run."""
    return lambda wildcards: PLAN.table_inputs(stage)


def curve_resource(key):
    """Memory and GPUs of a curve point's job, as for its stage's generation jobs."""

    def value(wildcards, attempt):
        return generation_resource(wildcards.stage, key)(wildcards, attempt)

    return value


def timed_training_resource(key):
    """Memory and GPUs of a training timing: as for its stage's run at the largest batch size
    it times."""

    def value(wildcards, attempt):
        settings = PLAN.timed_settings(
            wildcards.stage,
            int(wildcards.seed),
            wildcards.model,
            wildcards.dataset,
            wildcards.device,
        )
        sizes = [s[1] if isinstance(s, list) else s for s in settings] or [1]
        run = TrainingRun(
            int(wildcards.seed),
            wildcards.model,
            wildcards.dataset,
            max(sizes),
            wildcards.device,
            1,
        )
        return PLAN.training_resources(wildcards.stage, run, attempt)[key]

    return value
