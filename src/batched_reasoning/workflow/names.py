"""Names that runs and tables share. Kept free of torch, so the table jobs start fast."""

from __future__ import annotations


def student_name(model: str, batch_size, device: str, world_size=1) -> str:
    """The model name a distilled student is evaluated under (`-wsN` only for N > 1 ranks)."""
    ranks = f"-ws{world_size}" if int(world_size) > 1 else ""
    return f"{model}-distilled-bs{batch_size}-{device}{ranks}"


def machine_label(record: dict) -> str:
    """A machine's name in merged tables: its processor (and the CPU class it acted out, if
    any), threads, and whether a scheduler let other jobs share its node while it was timed."""
    name = record["device_name"] if record["device"] != "cpu" else record["cpu"]
    if record["device"] == "cpu" and record.get("cpu_class", "native") != "native":
        name += f" as {record['cpu_class']}"  # the same processor acting out another class
    threads = record["threads"]
    shared = (record.get("allocation") or {}).get("exclusive") is False
    return f"{name}, {threads} thread{'s' if threads > 1 else ''}{', node shared' if shared else ''}"


def dataset_path(dataset: str, split: str = "test") -> str:
    """Where a dataset's split is (every source writes the same layout)."""
    return f"resources/data/{dataset}/{split}.jsonl"


def download_path(model: str) -> str:
    """Where the workflow keeps its copy of a hub model (the same for every seed)."""
    return f"resources/models/{model}"


def teacher_path(dataset: str) -> str:
    """Where a dataset's teacher traces for distillation are."""
    return f"resources/teacher/{dataset}.json"
