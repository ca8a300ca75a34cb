"""Where every run writes. Each kind of folder is written once, as a pattern of its fields: the
rules name their outputs with `pattern` (the fields a rule does not fix stay Snakemake
wildcards), the plan names one run's files with `path`.

Every seed-dependent output is under `<root>/seed<N>/` (`root`: the configuration's
`results_dir`); the data and downloads under `resources/` are shared by every seed and
configuration (`names.dataset_path`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


class _Wildcards(dict):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def fill(template: str, **fields) -> str:
    """`template` with the given fields filled in and every other `{field}` left as it is."""
    return template.format_map(_Wildcards(fields))


class Located:
    """A kind of run with a folder pattern (`FOLDER`, relative to the results root)."""

    FOLDER = ""

    @classmethod
    def pattern(cls, name: str = "", root: str = "results", **fixed) -> str:
        """The folder (or the file `name` in it) with `fixed` fields filled in."""
        folder = f"{root}/{fill(cls.FOLDER, **fixed)}"
        return f"{folder}/{name}" if name else folder

    def fields(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "root"}

    def path(self, name: str = "") -> str:
        """This run's folder, or the file `name` in it."""
        return self.pattern(name, self.root, **self.fields())


@dataclass(frozen=True)
class GenerationRun(Located):
    """One run of a generation stage (evaluation or self-consistency)."""

    FOLDER = "seed{seed}/{stage}/{model}/{dataset}/{strategy}/bs{batch_size}/{device}"

    seed: int
    model: str
    dataset: str
    strategy: str
    batch_size: int
    device: str
    root: str = "results"

    def path(self, stage: str, name: str) -> str:
        return self.pattern(name, self.root, stage=stage, **self.fields())


@dataclass(frozen=True)
class TrainingRun(Located):
    """One run of a training stage (GRPO has a rollout strategy, distillation none)."""

    FOLDER = "seed{seed}/{stage}/{model}/{dataset}/{strategy}/bs{batch_size}/{device}/ws{world_size}"

    seed: int
    model: str
    dataset: str
    batch_size: int
    device: str
    world_size: int
    strategy: str | None = None
    root: str = "results"

    @classmethod
    def pattern(cls, name: str = "", root: str = "results", **fixed) -> str:
        if fixed.get("stage") == "distill":  # no rollouts: no strategy in its path
            fixed = {k: v for k, v in fixed.items() if k != "strategy"}
            return super().pattern(name, root, **fixed).replace("/{strategy}/", "/")
        return super().pattern(name, root, **fixed)

    def path(self, stage: str, name: str) -> str:
        return self.pattern(name, self.root, stage=stage, **self.fields())


@dataclass(frozen=True)
class CurvePoint(Located):
    """One point of a stage's batching curve: every strategy at one batch size, timed with
    `threads` threads (part of the path: a run at another thread count is another point)."""

    FOLDER = "seed{seed}/curve/{stage}/{model}/{dataset}/bs{batch_size}/{device}/t{threads}"

    seed: int
    stage: str
    model: str
    dataset: str
    batch_size: int
    device: str
    threads: int
    root: str = "results"


@dataclass(frozen=True)
class TimedTraining(Located):
    """The timing of a training stage's first steps: one at a time against each configured
    batched setting, with `threads` threads (part of the path, as for a curve point)."""

    FOLDER = "seed{seed}/timed_training/{stage}/{model}/{dataset}/{device}/t{threads}"

    seed: int
    stage: str
    model: str
    dataset: str
    device: str
    threads: int
    root: str = "results"


@dataclass(frozen=True)
class Probe(Located):
    """The batch-size probe of one stage for one model, dataset and device (`auto`)."""

    FOLDER = "autotune/seed{seed}/{stage}/{model}/{dataset}/{device}.json"  # one file

    seed: int
    stage: str
    model: str
    dataset: str
    device: str
    root: str = "results"

    def wildcards(self) -> dict[str, str]:
        return {name: str(value) for name, value in self.fields().items()}


@dataclass(frozen=True)
class Pretraining(Located):
    """The toy's pretraining under one seed: its initial and trained checkpoints, log, curve."""

    FOLDER = "seed{seed}/pretrain/{model}"

    seed: int
    model: str
    root: str = "results"


@dataclass(frozen=True)
class ToyTokenizer(Located):
    """The toy's tokenizer: one for every seed (it is trained on the shared data)."""

    FOLDER = "tokenizers/{model}"

    model: str
    root: str = "results"
