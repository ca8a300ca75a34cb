import re
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from batched_reasoning.config import Qwen3Config
from batched_reasoning.memory_model import predict_peak_mb
from batched_reasoning.provenance import code_hash
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
        "distill",
        "tables",
    )
}


wildcard_constraints:
    model=r"[A-Za-z0-9][A-Za-z0-9._-]*",
    dataset=r"[A-Za-z0-9][A-Za-z0-9._-]*",
    strategy=r"sequential|batched|batched_stop|continuous",
    batch_size=r"[1-9][0-9]*",
    device=r"cpu|cuda|mps",


def model_dir(model):
    entry = config["models"][model]
    if entry["source"] == "local":
        return entry["path"]
    return f"resources/models/{model}"


# A distilled student is named after its teacher run; it is evaluated on the dataset it learned.
STUDENT = re.compile(
    r"(?P<base>.+)-distilled-bs(?P<batch_size>\d+)-(?P<device>cpu|cuda|mps)"
)


def base_model(model):
    match = STUDENT.fullmatch(model)
    return match["base"] if match and match["base"] in config["models"] else model


def model_input(wildcards):
    match = STUDENT.fullmatch(wildcards.model)
    if match and match["base"] in config["models"]:
        return (
            f"results/distill/{match['base']}/{wildcards.dataset}/"
            f"bs{match['batch_size']}/{match['device']}/model"
        )
    return model_dir(wildcards.model)


def prompt_style_of(wildcards):
    return config["models"][base_model(wildcards.model)]["prompt_style"]


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


def generation_mem_mb(wildcards, attempt):
    """Memory to ask a scheduler for: the memory model's prediction for this model and batch
    size with 50% headroom, and more on each retry."""
    predicted = predict_peak_mb(
        architecture(wildcards.model),
        config["dtype"][wildcards.device],
        int(wildcards.batch_size),
        PROMPT_TOKENS,
        EVAL["max_new_tokens"],
        "cpu",
    )["total"]
    return int(attempt * 1.5 * predicted)


def gpus(wildcards):
    return 1 if wildcards.device == "cuda" else 0


def grpo_mem_mb(wildcards, attempt):
    """Weights, gradients and AdamW state (four copies of the model) plus the rollouts."""
    base = 2000 if config["models"][wildcards.model]["source"] == "toy" else 16000
    return attempt * (base + 200 * int(wildcards.batch_size))


def distill_runs():
    """(model, dataset, batch_size, device) of every distillation run."""
    for model in DISTILL["models"]:
        for dataset in DISTILL["datasets"]:
            for device in DISTILL["devices"]:
                for batch_size in DISTILL["batch_sizes"]:
                    yield model, dataset, batch_size, device


def distill_path(name):
    return [
        f"results/distill/{m}/{d}/bs{b}/{dev}/{name}" for m, d, b, dev in distill_runs()
    ]


def distill_evaluations():
    """Greedy evaluations of every student and of the model it started from."""
    size = DISTILL["eval_batch_size"]
    paths = set()
    for model, dataset, batch_size, device in distill_runs():
        for name in (model, f"{model}-distilled-bs{batch_size}-{device}"):
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
    """Weights, gradients and AdamW state, plus activations per batch row; more on retry."""
    base = (
        2000
        if config["models"][base_model(wildcards.model)]["source"] == "toy"
        else 16000
    )
    return attempt * (base + 500 * int(wildcards.batch_size))
