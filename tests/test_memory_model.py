"""The memory model: its arithmetic, and its prediction against a measured peak on this CPU."""

import json
import subprocess
import sys

import pytest
from conftest import random_model

from batched_reasoning.config import Qwen3Config
from batched_reasoning.memory_model import (
    CPU_FIRST_PASS_MB,
    largest_batch_that_fits,
    parameter_count,
    predict_peak_mb,
)

MODERATE = {
    "vocab_size": 32000, "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 768, "max_position_embeddings": 4096,
}
CONFIG = Qwen3Config(**MODERATE)


def predict(batch=4, prompt=128, new=64, dtype="float32", device="cpu", config=CONFIG):
    return predict_peak_mb(config, dtype, batch, prompt, new, device)


@pytest.mark.parametrize("overrides", [{}, {"tie_word_embeddings": False, "attention_bias": True}])
def test_parameter_count_matches_the_model(overrides):
    model = random_model(**overrides)
    assert parameter_count(model.cfg) == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_components_add_up(device):
    parts = predict(device=device)
    total = parts.pop("total")
    assert set(parts) == {"weights", "kv_cache", "activations", "logits", "runtime"}
    assert total == pytest.approx(sum(parts.values()))
    assert all(v >= 0 for v in parts.values())


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_monotone_in_batch_and_length(device):
    totals = [predict(batch=b, device=device)["total"] for b in (1, 2, 4, 8, 16)]
    assert totals == sorted(totals) and len(set(totals)) == len(totals)
    by_prompt = [predict(prompt=t, device=device)["total"] for t in (16, 128, 1024)]
    assert by_prompt == sorted(by_prompt) and len(set(by_prompt)) == 3
    assert predict(new=512, device=device)["kv_cache"] > predict(new=64, device=device)["kv_cache"]


def test_half_precision_halves_weights_and_cache():
    fp32, bf16 = predict(dtype="float32"), predict(dtype="bfloat16")
    assert bf16["weights"] == pytest.approx(fp32["weights"] / 2)
    assert bf16["kv_cache"] == pytest.approx(fp32["kv_cache"] / 2)
    assert bf16["logits"] == fp32["logits"]  # scores are float32 whatever the weights


def test_cuda_counts_no_process_baseline():
    assert predict(device="cuda")["runtime"] == 0
    measured = predict_peak_mb(CONFIG, "float32", 4, 128, 64, "cpu", baseline_mb=100.0)
    assert measured["runtime"] == 100 + CPU_FIRST_PASS_MB


def test_largest_batch_that_fits():
    cost = {b: predict(batch=b)["total"] for b in (1, 2, 4, 8)}
    assert largest_batch_that_fits(CONFIG, "float32", cost[4] + 0.1, 128, 64, "cpu",
                                   candidates=(1, 2, 4, 8)) == 4
    assert largest_batch_that_fits(CONFIG, "float32", cost[1] - 1, 128, 64, "cpu") is None


def test_bad_arguments():
    with pytest.raises(ValueError, match="dtype"):
        predict(dtype="float8")
    with pytest.raises(ValueError, match="device"):
        predict(device="tpu")


MEASURE = """
import json, sys, psutil, torch
from batched_reasoning.config import Qwen3Config
from batched_reasoning.generation import generate
from batched_reasoning.memory import PeakMemory
from batched_reasoning.model import Qwen3
config, batch, prompt, new = json.loads(sys.argv[1]), *map(int, sys.argv[2:])
torch.manual_seed(0)
model = Qwen3(Qwen3Config(**config)).eval()
prompts = torch.randint(4, 1000, (batch, prompt)).tolist()
with PeakMemory("cpu") as memory:
    generate(model, prompts, strategy="batched", batch_size=batch, max_new_tokens=new,
             eos_token_id=None, pad_token_id=0)
print(memory.peak_mb)
"""


@pytest.mark.parametrize("batch", [2, 12])
def test_prediction_matches_measured_peak(batch):
    """A fresh process, so nothing earlier in this one hides in (or inflates) its RSS."""
    prompt, new = 256, 16
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, json.dumps(MODERATE), str(batch), str(prompt), str(new)],
        capture_output=True, text=True, check=True,
    )
    measured = float(out.stdout.split()[-1])
    predicted = predict(batch=batch, prompt=prompt, new=new)["total"]
    assert predicted == pytest.approx(measured, rel=0.25)

