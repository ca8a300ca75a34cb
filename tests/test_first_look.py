"""The documented first look at Appendix E (`configs/appendix-e.yaml` +
`configs/appendix-e-first-look.yaml`) runs to its 8-row table offline on the CPU, on data shaped
like the real thing: a Hugging Face cache holding Qwen3's real tokenizer and vocabulary (the
other sizes tiny), MATH-500's records, a Parquet train split, and DeepSeek-R1 traces as long as
the book's own sample outputs (about 650 to 1,950 tokens)."""

import json
import os
import re
import subprocess

import pandas as pd
import pytest
import yaml
from tokenizers import Tokenizer
from conftest import SHARED_DATA, random_model
from test_hub import cache_repo
from workflow_helpers import REPO, SNAKEMAKE, copy_workflow, failed_job_errors

from batched_reasoning.model.checkpoint import save_model

pytestmark = pytest.mark.slow
COMMIT = "d" * 40
NEEDED = ("qwen3-tokenizer.json", "math500_test.json", "distill_sample_outputs.json")
# Qwen3-0.6B's vocabulary (its embedding has rows past the tokenizer's 151,669), tiny elsewhere
SHAPE = {"vocab_size": 151936, "hidden_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
         "intermediate_size": 128}


def checkpoint(root, name: str, tokenizer_json, generation_config: dict) -> dict[str, bytes]:
    """A checkpoint with the real model's file names, tokenizer and vocabulary."""
    source = root / f"{name}-source"
    source.mkdir()
    (source / "tokenizer.json").write_bytes(tokenizer_json.read_bytes())
    model = random_model(**SHAPE, max_position_embeddings=40960)
    (source / "config.json").write_text(json.dumps(model.cfg.to_dict() | {"eos_token_id": 151643}))
    save_model(model, root / name, source=source)
    (root / name / "generation_config.json").write_text(json.dumps(generation_config))
    return {f.name: f.read_bytes() for f in (root / name).iterdir()}


def first_look_cache(root):
    data = {name: SHARED_DATA / name for name in NEEDED}
    cache = root / "hub"
    endoftext, im_end = 151643, 151645
    cache_repo(cache, "model", "Qwen/Qwen3-0.6B-Base", COMMIT,
               checkpoint(root, "base", data["qwen3-tokenizer.json"], {"eos_token_id": endoftext}))
    cache_repo(cache, "model", "Qwen/Qwen3-0.6B", COMMIT,
               checkpoint(root, "reasoning", data["qwen3-tokenizer.json"],
                          {"eos_token_id": [im_end, endoftext]}))
    records = json.loads(data["math500_test.json"].read_text())
    cache_repo(cache, "dataset", "HuggingFaceH4/MATH-500", COMMIT,
               {"test.jsonl": "".join(json.dumps(r) + "\n" for r in records).encode()})
    # the train split's schema (level "Level N", type); problems other than the test's first ones
    train = pd.DataFrame([{"problem": r["problem"], "level": f"Level {r['level']}",
                           "type": r["subject"], "solution": r["solution"], "answer": r["answer"],
                           "unique_id": i} for i, r in enumerate(records[100:140])])
    parquet = root / "train.parquet"
    train.to_parquet(parquet)
    config = yaml.safe_load((REPO / "configs/appendix-e.yaml").read_text())
    split = config["datasets"]["math500"]["train"]
    cache_repo(cache, "dataset", split["repo_id"], COMMIT, {split["filename"]: parquet.read_bytes()})
    # the book's five sample traces, eight times over: some fit max_seq_len 1024, some do not
    traces = json.loads(data["distill_sample_outputs.json"].read_text()) * 8
    teacher = config["distill"]["teacher"]
    cache_repo(cache, "dataset", teacher["repo_id"], COMMIT,
               {teacher["filename"]: json.dumps(traces).encode()})
    return cache, traces


@pytest.mark.skipif(not all((SHARED_DATA / name).is_file() for name in NEEDED),
                    reason="needs ../shared/data: Qwen3's tokenizer, MATH-500 and the book's traces")
def test_the_first_look_fills_appendix_e_offline_on_real_shaped_data(tmp_path):
    cache, traces = first_look_cache(tmp_path)
    tokenizer = Tokenizer.from_file(str(SHARED_DATA / "qwen3-tokenizer.json"))
    lengths = [len(tokenizer.encode(t["message_thinking"] + t["message_content"]).ids)
               for t in traces[:5]]
    assert min(lengths) < 1024 < max(lengths)  # the traces are as long as the book's

    # the shipped configs as they are: only the device and the checkpoints' shape differ
    workdir = copy_workflow(tmp_path / "run")
    devices = {stage: {"devices": ["cpu"]}
               for stage in ("evaluate", "self_consistency", "grpo", "distill")}
    (workdir / "cpu.yaml").write_text(yaml.safe_dump(
        devices | {"models": {name: {"shape": SHAPE}
                              for name in ("qwen3-0.6b-base", "qwen3-0.6b-reasoning")}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env |= {"HF_HUB_CACHE": str(cache), "HF_HOME": str(tmp_path / "hf_home"),
            "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
    cmd = [*SNAKEMAKE, "--cores", "2", "--configfile", "configs/appendix-e.yaml",
           "configs/appendix-e-first-look.yaml", "cpu.yaml"]
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, failed_job_errors(workdir, proc.stdout + proc.stderr)

    results = workdir / "results/appendix-e-first-look"
    table = pd.read_csv(results / "tables/appendix_e.tsv", sep="\t")
    assert list(zip(table["workload"], table["mode"])) == [
        (w, m) for w in ("evaluation", "self_consistency", "grpo", "distillation")
        for m in ("one at a time", "batched")]
    assert table[["work_s", "total_s", "throughput", "peak_mem_mb"]].notna().all().all()
    batched = table[table["mode"] == "batched"].set_index("workload")
    # greedy evaluation and distillation's losses are the same either way; sampling on random
    # weights over 151,936 tokens may part at a near-tie, and the table says which it is
    assert batched.loc["evaluation", "same_outputs"].startswith("yes")
    assert batched.loc["distillation", "same_outputs"].startswith("yes")
    for workload in ("self_consistency", "grpo"):  # "yes", or "...: 2 near-tie, 0 MISMATCH"
        verdict = batched.loc[workload, "same_outputs"]
        assert verdict.startswith("yes") or "near-tie" in verdict, (workload, verdict)
        assert not re.search(r"[1-9]\d* MISMATCH", verdict), (workload, verdict)
    markdown = (results / "tables/appendix_e.md").read_text()
    assert "inf" not in markdown  # an interval from too few repeats is not shown as one
    distill = json.loads(next((results / "seed0").glob("distill/**/metrics.json")).read_text())
    assert distill["n_too_long"] > 0  # the long traces were dropped, the rest trained
