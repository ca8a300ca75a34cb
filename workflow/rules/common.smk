import re

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from batched_reasoning.provenance import code_hash

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


for stage in ("evaluate", "self_consistency", "grpo"):
    check_known(stage, "models", "models")
    check_known(stage, "datasets", "datasets")

EVAL = config["evaluate"]
GRPO = config["grpo"]

# Library code behind each stage: editing a module reruns exactly the stages that import it.
CODE = {
    stage: code_hash(stage)
    for stage in (
        "toy",
        "pretrain",
        "hub",
        "data",
        "evaluate",
        "self_consistency",
        "grpo",
        "tables",
    )
}


wildcard_constraints:
    model=r"[A-Za-z0-9][A-Za-z0-9._-]*",
    dataset=r"[A-Za-z0-9][A-Za-z0-9._-]*",
    strategy=r"sequential|batched|batched_stop",
    batch_size=r"[1-9][0-9]*",
    device=r"cpu|cuda|mps",


def model_dir(model):
    entry = config["models"][model]
    if entry["source"] == "local":
        return entry["path"]
    return f"resources/models/{model}"


def model_input(wildcards):
    return model_dir(wildcards.model)


def dataset_file(wildcards):
    return f"resources/data/{wildcards.dataset}/test.jsonl"


def dtype_of(wildcards):
    return config["dtype"][wildcards.device]


def sweep(section):
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


def sweep_paths(section, name):
    return [
        f"results/{section}/{m}/{d}/{s}/bs{b}/{dev}/{name}"
        for m, d, s, b, dev in sweep(section)
    ]


def generation_mem_mb(wildcards, attempt):
    """Memory to ask a scheduler for: model weights plus a share per batch row, more on retry."""
    base = 1000 if config["models"][wildcards.model]["source"] == "toy" else 4000
    return attempt * (base + 100 * int(wildcards.batch_size))


def gpus(wildcards):
    return 1 if wildcards.device == "cuda" else 0


def grpo_mem_mb(wildcards, attempt):
    """Weights, gradients and AdamW state (four copies of the model) plus the rollouts."""
    base = 2000 if config["models"][wildcards.model]["source"] == "toy" else 16000
    return attempt * (base + 200 * int(wildcards.batch_size))
