import re
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from batched_reasoning.config import Qwen3Config
from batched_reasoning.memory_model import CPU_WORKFLOW_JOB_MB, predict_peak_mb
from batched_reasoning.provenance import script_code_hash
from batched_reasoning.tables import student_name
from batched_reasoning.toy_tokenizer import QWEN3_SPECIAL_TOKENS

validate(config, "../schemas/config.schema.yaml")


def names_of(source, catalogue):
    return [
        name for name, entry in config[catalogue].items() if entry["source"] == source
    ]


def alternation(names):
    """A wildcard regex matching exactly these names (or nothing)."""
    return "|".join(re.escape(n) for n in names) or "(?!)"


def check_known(section, key, catalogue):
    for name in config[section][key]:
        if name not in config[catalogue]:
            raise WorkflowError(
                f"config: {section}.{key} names {name!r}, which is not in `{catalogue}` "
                f"(known: {', '.join(sorted(config[catalogue]))})"
            )


for stage in ("evaluate", "self_consistency", "grpo", "distill"):
    check_known(stage, "models", "models")
    check_known(stage, "datasets", "datasets")

EVAL = config["evaluate"]
GRPO = config["grpo"]
DISTILL = config["distill"]

_step_rollouts = GRPO["problems_per_step"] * GRPO["num_rollouts"]
for _ranks in GRPO["world_sizes"]:
    if _ranks > _step_rollouts:
        raise WorkflowError(
            f"config: grpo.world_sizes has {_ranks}, more ranks than the {_step_rollouts} "
            "rollouts of a step (grpo.problems_per_step x grpo.num_rollouts): ranks would idle"
        )

# Library code behind each script: editing a module's code reruns exactly the jobs whose script
# imports it, directly or not (comments, docstrings and layout do not count).
CODE = {
    script.stem: script_code_hash(script)
    for script in Path(workflow.basedir, "workflow", "scripts").glob("*.py")
}


wildcard_constraints:
    model=r"[A-Za-z0-9][A-Za-z0-9._-]*",
    dataset=r"[A-Za-z0-9][A-Za-z0-9._-]*",
    strategy=r"sequential|batched|batched_stop|continuous",
    batch_size=r"[1-9][0-9]*",
    device=r"cpu|cuda|mps",
    world_size=r"[1-9][0-9]*",


def model_dir(model):
    entry = config["models"][model]
    if entry["source"] == "local":
        return entry["path"]
    return f"resources/models/{model}"


# A distilled student is named after its training run (`-wsN` only for N > 1 ranks); it is
# evaluated on the dataset it learned.
STUDENT = re.compile(
    r"(?P<base>.+)-distilled-bs(?P<batch_size>\d+)-(?P<device>cpu|cuda|mps)(?:-ws(?P<world_size>\d+))?"
)


def base_model(model):
    match = STUDENT.fullmatch(model)
    return match["base"] if match and match["base"] in config["models"] else model


def model_input(wildcards):
    match = STUDENT.fullmatch(wildcards.model)
    if match and match["base"] in config["models"]:
        return (
            f"results/distill/{match['base']}/{wildcards.dataset}/"
            f"bs{match['batch_size']}/{match['device']}/ws{match['world_size'] or 1}/model"
        )
    return model_dir(wildcards.model)


def prompt_style_of(wildcards):
    return config["models"][base_model(wildcards.model)]["prompt_style"]


def dataset_file(wildcards):
    return f"resources/data/{wildcards.dataset}/test.jsonl"


def dtype_of(wildcards):
    return config["dtype"][wildcards.device]


def requested(section):
    """(model, dataset, strategy, batch_size, device) of every run a stage's config asks for.

    `sequential` is one sequence at a time whatever the batch size, so it runs once (size 1).
    """
    cfg = config[section]
    for model in cfg["models"]:
        for dataset in cfg["datasets"]:
            for device in cfg["devices"]:
                for strategy in cfg["strategies"]:
                    sizes = [1] if strategy == "sequential" else cfg["batch_sizes"]
                    for batch_size in sizes:
                        yield model, dataset, strategy, batch_size, device


def over_budget(section, run):
    """The predicted peak of a generation run if it exceeds its device's memory budget."""
    model, _, strategy, batch_size, device = run
    budget = config["memory_budget_mb"][device]
    if budget is None or section not in ("evaluate", "self_consistency"):
        return None
    effective = 1 if strategy == "sequential" else batch_size
    predicted = predicted_generation_mb(section, model, effective, device)
    return predicted if predicted > budget else None


def sweep(section):
    """The requested runs of a stage that fit the memory budget (all, without one)."""
    return [run for run in requested(section) if over_budget(section, run) is None]


def skipped_runs(section):
    """Runs left out by the memory budget, with the reason, for the stage's table."""
    skipped = []
    for run in requested(section):
        predicted = over_budget(section, run)
        if predicted is not None:
            model, dataset, strategy, batch_size, device = run
            budget = config["memory_budget_mb"][device]
            skipped.append(
                {
                    "model": model,
                    "dataset": dataset,
                    "strategy": strategy,
                    "batch_size": batch_size,
                    "device": device,
                    "dtype": config["dtype"][device],
                    "predicted_mem_mb": round(predicted),
                    "note": f"skipped: predicted {predicted:.0f} MB > budget {budget:g} MB",
                }
            )
    return skipped


def sweep_paths(section, name):
    return [
        f"results/{section}/{m}/{d}/{s}/bs{b}/{dev}/{name}"
        for m, d, s, b, dev in sweep(section)
    ]


def grpo_paths(name):
    return [
        f"results/grpo/{m}/{d}/{s}/bs{b}/{dev}/ws{w}/{name}"
        for m, d, s, b, dev in sweep("grpo")
        for w in GRPO["world_sizes"]
    ]


# Shape assumed for a hub model whose config.json is not downloaded yet (Qwen3-0.6B).
DEFAULT_ARCHITECTURE = Qwen3Config(
    vocab_size=151_936,
    hidden_size=1024,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    intermediate_size=3072,
)
# Prompt length the memory requests allow for (MATH-500 prompts are shorter).
PROMPT_TOKENS = 512


def architecture(model):
    """A model's shape, known before it is built or downloaded where possible."""
    base = base_model(model)
    if config["models"][base]["source"] == "toy":
        toy = dict(config["toy"])
        toy["vocab_size"] += len(QWEN3_SPECIAL_TOKENS)
        return Qwen3Config(**toy)
    path = Path(model_dir(base)) / "config.json"
    return Qwen3Config.from_file(path) if path.is_file() else DEFAULT_ARCHITECTURE


def predicted_generation_mb(section, model, batch_size, device):
    """The memory model's peak for a generation job of `section` (prompts of PROMPT_TOKENS)."""
    return predict_peak_mb(
        architecture(model),
        config["dtype"][device],
        batch_size,
        PROMPT_TOKENS,
        config[section]["max_new_tokens"],
        "cpu" if device == "cpu" else "cuda",
        CPU_WORKFLOW_JOB_MB if device == "cpu" else None,
    )["total"]


def generation_mem_mb(section):
    """Memory a `section` job asks a scheduler for: the memory model's prediction for its model
    and batch size with 50% headroom, and more on each retry."""

    def mem_mb(wildcards, attempt):
        predicted = predicted_generation_mb(
            section, wildcards.model, int(wildcards.batch_size), wildcards.device
        )
        return int(attempt * 1.5 * predicted)

    return mem_mb


def gpus(wildcards):
    return 1 if wildcards.device == "cuda" else 0


# A training run launches its `world_size` ranks from one job (torchrun's launcher forks them),
# so on a cluster it is one task with `threads` CPUs per rank, and one GPU per rank on CUDA.
def training_threads(wildcards):
    return config["threads"] * int(wildcards.world_size)


def training_gpus(wildcards):
    return gpus(wildcards) * int(wildcards.world_size)


def grpo_mem_mb(wildcards, attempt):
    """Per rank: weights, gradients and AdamW state (four copies of the model) plus the
    rollouts."""
    base = 2000 if config["models"][wildcards.model]["source"] == "toy" else 16000
    rank = base + 200 * int(wildcards.batch_size)
    return attempt * rank * int(wildcards.world_size)


def distill_runs():
    """(model, dataset, batch_size, device, world_size) of every distillation run."""
    for model in DISTILL["models"]:
        for dataset in DISTILL["datasets"]:
            for device in DISTILL["devices"]:
                for batch_size in DISTILL["batch_sizes"]:
                    for world_size in DISTILL["world_sizes"]:
                        yield model, dataset, batch_size, device, world_size


def distill_path(name):
    return [
        f"results/distill/{m}/{d}/bs{b}/{dev}/ws{w}/{name}"
        for m, d, b, dev, w in distill_runs()
    ]


def distill_evaluations():
    """Greedy evaluations of every student and of the model it started from."""
    size = DISTILL["eval_batch_size"]
    paths = set()
    for model, dataset, batch_size, device, world_size in distill_runs():
        for name in (model, student_name(model, batch_size, device, world_size)):
            paths.add(
                f"results/evaluate/{name}/{dataset}/batched_stop/bs{size}/{device}/metrics.json"
            )
    return sorted(paths)


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


def distill_mem_mb(wildcards, attempt):
    """Per rank: weights, gradients and AdamW state, plus activations per batch row; more on
    retry."""
    base = (
        2000
        if config["models"][base_model(wildcards.model)]["source"] == "toy"
        else 16000
    )
    rank = base + 500 * int(wildcards.batch_size)
    return attempt * rank * int(wildcards.world_size)


for stage in ("evaluate", "self_consistency"):
    if n_skipped := len(skipped_runs(stage)):
        print(
            f"memory_budget_mb: {n_skipped} {stage} run(s) predicted not to "
            "fit are skipped (see their table)",
            file=sys.stderr,
        )
