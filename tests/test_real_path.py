"""The real model's path, offline: a Hugging Face cache holding `Qwen/Qwen3-0.6B-Base`,
`Qwen/Qwen3-0.6B` and `HuggingFaceH4/MATH-500` (their real repo and file names, with tiny
weights) runs `configs/qwen3-0.6b-math500.yaml` on a few problems, with `HF_HUB_OFFLINE=1`."""

import json
import os
import re
import subprocess

import pandas as pd
import pytest
import yaml
from conftest import SHARED_DATA, TINY, random_model
from test_hub import cache_repo
from workflow_helpers import REPO, SNAKEMAKE, copy_workflow, snakemake

from batched_reasoning.model.checkpoint import save_model
from batched_reasoning.core.io import read_json, read_jsonl
from batched_reasoning.world.toy_tokenizer import train_toy_tokenizer

pytestmark = pytest.mark.slow
COMMIT = "c" * 40
PROBLEMS = [
    {"problem": "What is $2+3$?", "solution": "$2+3=5$.", "answer": "5", "subject": "Prealgebra",
     "level": 1, "unique_id": "test/prealgebra/1.json"},
    {"problem": "Compute $7 \\cdot 6$.", "solution": "$42$.", "answer": "42", "subject": "Prealgebra",
     "level": 2, "unique_id": "test/prealgebra/2.json"},
    {"problem": "Simplify $\\frac{4}{8}$.", "solution": "$\\frac12$.", "answer": "\\frac{1}{2}",
     "subject": "Algebra", "level": 2, "unique_id": "test/algebra/3.json"},
]


def checkpoint_files(tmp_path, name, tokenizer, generation_config) -> dict[str, bytes]:
    """A tiny Qwen3 with the real checkpoint's file names."""
    source = tmp_path / f"{name}-source"
    source.mkdir()
    tokenizer.save(str(source / "tokenizer.json"))
    end = tokenizer.token_to_id("<|endoftext|>")
    model = random_model(vocab_size=tokenizer.get_vocab_size(with_added_tokens=True))
    (source / "config.json").write_text(json.dumps(model.cfg.to_dict() | {"eos_token_id": end}))
    save_model(model, tmp_path / name, source=source)
    (tmp_path / name / "generation_config.json").write_text(json.dumps(generation_config))
    return {f.name: f.read_bytes() for f in (tmp_path / name).iterdir()}


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("real-path")
    tokenizer = train_toy_tokenizer([p["problem"] + " " + p["solution"] for p in PROBLEMS] * 20, 300)
    end, im_end = tokenizer.token_to_id("<|endoftext|>"), tokenizer.token_to_id("<|im_end|>")
    cache = root / "hub"
    cache_repo(cache, "model", "Qwen/Qwen3-0.6B-Base", COMMIT,
               checkpoint_files(root, "base", tokenizer, {"eos_token_id": end}))
    cache_repo(cache, "model", "Qwen/Qwen3-0.6B", COMMIT,
               checkpoint_files(root, "reasoning", tokenizer, {"eos_token_id": [im_end, end]}))
    records = PROBLEMS
    if (SHARED_DATA / "math500_test.json").is_file():  # the real records, where present
        records = json.loads((SHARED_DATA / "math500_test.json").read_text())[:3]
    cache_repo(cache, "dataset", "HuggingFaceH4/MATH-500", COMMIT,
               {"test.jsonl": "".join(json.dumps(r) + "\n" for r in records).encode()})
    return cache, (im_end, end), tokenizer.get_vocab_size(with_added_tokens=True)


def test_the_qwen_config_runs_offline_from_the_hugging_face_cache(hub_cache, tmp_path):
    cache, ends, vocab_size = hub_cache
    # The catalogue declares the checkpoints' shape (here the tiny one), as it does Qwen3-0.6B's.
    shape = {key: value for key, value in TINY.items() if key != "max_position_embeddings"}
    shape["vocab_size"] = vocab_size
    overrides = {
        "models": {name: {"shape": shape} for name in ("qwen3-0.6b-base", "qwen3-0.6b-reasoning")},
        "evaluate": {"devices": ["cpu"], "batch_sizes": [2], "limit": 3, "max_new_tokens": 6,
                     "strategies": ["sequential", "batched_stop"], "timed_problems": 3,
                     "accuracy_batch_size": 2},
        "timing": {"minimum_repeats": 2, "maximum_repeats": 2},
    }
    workdir = copy_workflow(tmp_path / "run")
    config = yaml.safe_load((workdir / "configs/qwen3-0.6b-math500.yaml").read_text())
    config["evaluate"] |= overrides.pop("evaluate")
    (workdir / "tiny.yaml").write_text(yaml.safe_dump(config | overrides))  # the Qwen config
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env |= {"HF_HUB_CACHE": str(cache), "HF_HOME": str(tmp_path / "hf_home"),
            "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
    snakemake(workdir, "results/tables/evaluate.tsv", env=env)

    table = pd.read_csv(workdir / "results/tables/evaluate.tsv", sep="\t")
    assert set(table.model) == {"qwen3-0.6b-base", "qwen3-0.6b-reasoning"}
    assert set(table.dataset) == {"math500"} and (table.tokens_per_s > 0).all()
    assert set(zip(table.strategy, table.batch_size)) == {("sequential", 1), ("batched_stop", 2)}
    assert (table.matches_sequential == "yes").all() and (table.accuracy_problems == 3).all()
    assert (workdir / "results/plots/evaluate.png").stat().st_size > 10_000
    reasoning = read_json(
        workdir / "results/seed0/evaluate/qwen3-0.6b-reasoning/math500/batched_stop/bs2/cpu/metrics.json")
    assert reasoning["end_token_ids"] == list(ends)  # generation_config.json's two end tokens
    assert reasoning["n_problems"] == 3
    assert (workdir / "resources/models/qwen3-0.6b-base/generation_config.json").is_file()


def test_the_appendix_e_config_plans_the_books_four_workloads_apart_offline(hub_cache, tmp_path):
    """configs/appendix-e.yaml: every workload on Qwen3-0.6B under results/appendix-e/, GRPO's
    training problems from a Parquet file of another dataset repo, read from the cache."""
    cache, _, vocab_size = hub_cache
    train = [{"problem": "What is $1+1$?", "level": "Level 1", "type": "Prealgebra",
              "solution": "$\\boxed{2}$", "answer": "2", "unique_id": 7}]
    parquet = tmp_path / "train.parquet"
    pd.DataFrame(train).to_parquet(parquet)
    config = yaml.safe_load((REPO / "configs/appendix-e.yaml").read_text())
    cache_repo(cache, "dataset", config["datasets"]["math500"]["train"]["repo_id"], COMMIT,
               {config["datasets"]["math500"]["train"]["filename"]: parquet.read_bytes()})
    shape = {key: value for key, value in TINY.items() if key != "max_position_embeddings"}
    config["models"] = {name: {"shape": shape | {"vocab_size": vocab_size}}
                        for name in ("qwen3-0.6b-base", "qwen3-0.6b-reasoning")}
    workdir = copy_workflow(tmp_path / "run", config)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env |= {"HF_HUB_CACHE": str(cache), "HF_HOME": str(tmp_path / "hf_home"),
            "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}

    plan = snakemake(workdir, "-n", env=env).stdout
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", plan, re.M))
    assert jobs["time_training"] == "2" and jobs["appendix_e_table"] == "1"
    assert "results/appendix-e/tables/appendix_e.tsv" in plan
    assert "results/appendix-e/seed0/timed_training/grpo/qwen3-0.6b-base/math500/cuda/" in plan
    assert "results/appendix-e/seed0/curve/evaluate/qwen3-0.6b-reasoning/math500/bs64/cuda/" in plan
    assert "results/appendix-e/seed0/curve/self_consistency/qwen3-0.6b-base/math500/bs3/cuda/" in plan
    assert not re.search(r"(?<![\w/-])results/(seed|tables|plots)", plan)  # never the default run's

    snakemake(workdir, "resources/data/math500/train.jsonl", env=env)
    assert read_jsonl(workdir / "resources/data/math500/train.jsonl") == train

    # the documented first look: the overlay's own folder and its few steps
    first_look = subprocess.run(
        [*SNAKEMAKE, "-n", "--cores", "4", "--configfile", "configs/appendix-e.yaml",
         "configs/appendix-e-first-look.yaml"], cwd=workdir, env=env, capture_output=True,
        text=True, timeout=600)
    assert first_look.returncode == 0, first_look.stderr
    assert "results/appendix-e-first-look/tables/appendix_e.tsv" in first_look.stdout
    assert "results/appendix-e/" not in first_look.stdout
