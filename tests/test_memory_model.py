"""The memory model: its arithmetic, and its prediction against a measured peak on this CPU."""

import json
import subprocess
import sys

import pytest
import torch
from conftest import needs_cuda, random_model

from batched_reasoning.stages import evaluate as evaluate_module
from batched_reasoning.model.checkpoint import load_model, save_model
from batched_reasoning.model.config import Qwen3Config
from batched_reasoning.model.qwen3 import Qwen3
from batched_reasoning.stages.evaluate import EvaluationSettings, evaluate
from batched_reasoning.stages.tokenization import load_batches, tokenize
from batched_reasoning.core.io import read_json, read_jsonl, write_jsonl
from batched_reasoning.core.memory import MEASURES, PeakMemory
from batched_reasoning.engine.memory_model import (
    CPU_FIRST_PASS_MB,
    MB,
    largest_batch_that_fits,
    parameter_count,
    predict_peak_mb,
    weights_mb,
)
from batched_reasoning.engine.agreement import compare_answer
from batched_reasoning.world.toy_tokenizer import train_toy_tokenizer

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


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("packed", [False, True], ids=["plain", "packed"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_predicted_weights_are_the_models_real_tensors(dtype, packed, tied, packs_from_4_rows):
    """Plain, or packed for inference (a tied output layer then holds a packed copy)."""
    model = random_model(tie_word_embeddings=tied).to(getattr(torch, dtype))
    if packed and not model.pack_for_inference(batch_size=4):
        pytest.skip(f"this CPU cannot pack {dtype}")
    predicted = predict_peak_mb(model.cfg, dtype, 1, 8, 8, "cpu", packed=packed)["weights"]
    assert predicted == pytest.approx(weights_mb(model))


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
import json, sys, torch
from batched_reasoning.model.config import Qwen3Config
from batched_reasoning.engine.generation import generate
from batched_reasoning.core.memory import PeakMemory
from batched_reasoning.model.qwen3 import Qwen3
config, batch, prompt, new, distinct = json.loads(sys.argv[1]), *map(int, sys.argv[2:])
torch.set_num_threads(1)
torch.manual_seed(0)
model = Qwen3(Qwen3Config(**config)).eval()
prompts = torch.randint(4, 1000, (distinct, prompt)).tolist() * (batch // distinct)
with PeakMemory("cpu") as memory:
    generate(model, prompts, strategy="batched", batch_size=batch, max_new_tokens=new,
             eos_token_id=None, pad_token_id=0)
print(memory.peak_mb)
"""
WIDE = {  # a vocabulary as large as Qwen3's on a small body: the logits are what grows
    "vocab_size": 151_936, "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
    "num_key_value_heads": 1, "head_dim": 32, "intermediate_size": 128,
    "max_position_embeddings": 4096,
}


def measured_peak_mb(config: dict, batch: int, prompt: int, new: int, runs: int = 3,
                     distinct: int | None = None) -> float:
    """Peak RSS of a generation in fresh processes (nothing earlier hides in their RSS), the
    highest of a few: where the heap's pages land varies from process to process (seen: 30 MB
    of 540 in the kernel's exact peak, so one process alone can mislead by that much)."""
    peaks = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", MEASURE, json.dumps(config), str(batch), str(prompt), str(new),
             str(distinct or batch)],
            capture_output=True, text=True, check=True)
        peaks.append(float(out.stdout.split()[-1]))
    return max(peaks)


def coexisting_mb(config: dict, batch: int, prompt: int, new: int,
                  distinct: int | None = None) -> float:
    """Tensors that are provably alive at one moment of a float32 generation, whatever the heap
    keeps: the KV cache, allocated in full before the prefill; then, in the prefill's MLP, the
    residual stream, the boolean mask (distinct prompts x T x T), the gate, the up projection
    and their product; at the end, one row of logits per sequence."""
    c = Qwen3Config(**config)
    distinct = distinct or batch
    kv = 4 * 2 * c.num_hidden_layers * batch * (prompt + new) * c.num_key_value_heads * c.head_dim
    prefill = (4 * distinct * prompt * (c.hidden_size + 3 * c.intermediate_size)
               + distinct * prompt * prompt)
    logits = 4 * batch * c.vocab_size
    return (kv + max(prefill, logits)) / MB


@pytest.mark.parametrize("component, config, small, large", [
    ("kv_cache", MODERATE, (16, 16, 100), (16, 16, 600)),  # long decodes of short prompts
    ("activations", MODERATE, (8, 512, 1), (8, 1024, 1)),  # long prompts, one new token
    ("logits", WIDE, (8, 4, 1), (64, 4, 1)),  # many rows of a wide vocabulary
])
@pytest.mark.slow
def test_each_growing_component_matches_the_measured_growth(component, config, small, large):
    """Between two sizes the weights and the process's runtime cancel out, so what a run adds
    is what the components that scale predict. Each pair is chosen so that one component makes
    at least 70% of the growth: leaving it out of the model would fail the 25% tolerance.

    What the heap keeps of freed blocks varies from process to process and between CPUs (for
    the activations pair: 120 to 160 MB on an AMD EPYC, 100 on a CI machine, 84 with every
    freed block returned through a fixed MALLOC_MMAP_THRESHOLD_), so the measured growth is held
    between the growth of the tensors that must coexist (`coexisting_mb`: 62 MB there) and the
    prediction, a budget, each with the 25% tolerance."""
    cfg = Qwen3Config(**config)
    before, after = (predict_peak_mb(cfg, "float32", *size, "cpu") for size in (small, large))
    predicted = after["total"] - before["total"]
    assert after[component] - before[component] >= 0.7 * predicted
    grown = measured_peak_mb(config, *large) - measured_peak_mb(config, *small)
    floor = coexisting_mb(config, *large) - coexisting_mb(config, *small)
    assert 0.75 * floor <= grown <= 1.25 * predicted, (floor, predicted)


@pytest.mark.slow
def test_repeated_prompts_cost_the_activations_of_the_distinct_ones():
    """Eight samples of one long prompt prefill it once: the prediction drops the activations of
    seven prompts, and the measured peaks differ by what must coexist in seven prompts' prefill
    at least and by the prediction at most (each within 25%, as above)."""
    cfg = Qwen3Config(**MODERATE)
    apart, shared = (predict_peak_mb(cfg, "float32", 8, 1024, 1, "cpu", distinct_prompts=d)
                     for d in (8, 1))
    predicted = apart["total"] - shared["total"]
    assert predicted == pytest.approx(apart["activations"] - shared["activations"])
    assert predicted > 0
    saved = measured_peak_mb(MODERATE, 8, 1024, 1) - measured_peak_mb(MODERATE, 8, 1024, 1,
                                                                       distinct=1)
    floor = coexisting_mb(MODERATE, 8, 1024, 1) - coexisting_mb(MODERATE, 8, 1024, 1, 1)
    assert 0.75 * floor <= saved <= 1.25 * predicted, (floor, predicted)


def test_an_mps_run_is_predicted_measured_and_tabled(tmp_path, monkeypatch):
    """Evaluation on `mps` goes through the memory model, the measurement's description and
    the table; without a Mac the generation itself runs on the CPU."""
    monkeypatch.setattr(evaluate_module, "resolve_device", lambda name: torch.device("cpu"))
    records = [{"problem": f"What is {i}+1?", "answer": str(i + 1), "level": 1} for i in range(3)]
    write_jsonl(records, tmp_path / "test.jsonl")
    tokenizer = train_toy_tokenizer([r["problem"] for r in records] * 10, 300)
    (tmp_path / "source").mkdir()
    tokenizer.save(str(tmp_path / "source" / "tokenizer.json"))
    tiny_checkpoint = tmp_path / "tiny"
    save_model(random_model(vocab_size=tokenizer.get_vocab_size(with_added_tokens=True)),
               tiny_checkpoint, source=tmp_path / "source")
    tokenize(tiny_checkpoint, tmp_path / "test.jsonl", tmp_path / "bs2.safetensors",
             tmp_path / "bs2.stats.json", prompt_style="base", batch_size=2,
             sort_by_length=False, limit=None)
    for strategy, batch_size in (("sequential", 1), ("batched_stop", 2)):
        out = tmp_path / strategy
        settings = EvaluationSettings(strategy=strategy, batch_size=batch_size, device="mps",
                                      dtype="float16", compile="off", max_new_tokens=4,
                                      prompt_style="base", threads=1)
        evaluate(tiny_checkpoint, tmp_path / "bs2.safetensors", tmp_path / "bs2.stats.json",
                 out / "records.jsonl", out / "metrics.json", settings, {},
                 {"model": "tiny", "dataset": "d", "device": "mps"})
    metrics = read_json(tmp_path / "batched_stop" / "metrics.json")
    cfg = load_model(tiny_checkpoint).cfg
    prompt_len = max(len(p) for p in load_batches(tmp_path / "bs2.safetensors")[0])
    on_mps = predict_peak_mb(cfg, "float16", 2, prompt_len, 4, "mps")["total"]
    assert metrics["predicted_peak_memory_mb"] == pytest.approx(on_mps)  # the GPU-like model
    assert on_mps < predict_peak_mb(cfg, "float16", 2, prompt_len, 4, "cpu")["total"]
    sequential, batched = (read_jsonl(tmp_path / s / "records.jsonl")
                           for s in ("sequential", "batched_stop"))
    assert [compare_answer(b["generated_ids"], s["generated_ids"], s["margins"], "float16")
            for b, s in zip(batched, sequential)] == ["same"] * len(records)
    assert PeakMemory("mps").measure == MEASURES["mps"]  # what a Mac's table says


# --- the CUDA prediction against the fused attention's allocator peak (where a GPU exists) ----

CUDA = needs_cuda("needs a CUDA GPU: the allocator peak of the fused attention")
MEASURE_CUDA = """
import json, sys, torch
from batched_reasoning.model.config import Qwen3Config
from batched_reasoning.engine.generation import generate
from batched_reasoning.core.memory import PeakMemory
from batched_reasoning.model.qwen3 import Qwen3
config, dtype, (batch, prompt, new) = json.loads(sys.argv[1]), sys.argv[2], map(int, sys.argv[3:])
torch.manual_seed(0)
model = Qwen3(Qwen3Config(**config)).to("cuda", getattr(torch, dtype)).eval()
prompts = torch.randint(4, 1000, (batch, prompt)).tolist()
with PeakMemory("cuda") as memory:
    generate(model, prompts, strategy="batched", batch_size=batch, max_new_tokens=new,
             eos_token_id=None, pad_token_id=0)
print(memory.peak_mb)
"""
QWEN3_BODY = {  # Qwen3-0.6B's heads and widths on four layers: every layer holds the same
    "vocab_size": 151_936, "hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 16,
    "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 3072,
    "max_position_embeddings": 40_960,
}


def measured_cuda_peak_mb(config: dict, dtype: str, batch: int, prompt: int, new: int) -> float:
    """The allocator's peak (tensors only, weights included) of a generation in a fresh process:
    a caught OOM or an earlier run would leave a fragmented cache behind."""
    out = subprocess.run([sys.executable, "-c", MEASURE_CUDA, json.dumps(config), dtype,
                          str(batch), str(prompt), str(new)],
                         capture_output=True, text=True, check=True)
    return float(out.stdout.split()[-1])


@CUDA
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("batch, prompt", [(1, 512), (8, 1000), (16, 2048)])
def test_cuda_prediction_is_the_fused_attentions_allocator_peak(dtype, batch, prompt):
    """No process runtime on CUDA: the prediction is the allocator's peak itself. At 16 x 2048
    the math path's scores alone (2 x 16 x 16 x 2048² x 2 bytes = 4 GiB) would be most of it."""
    predicted = predict_peak_mb(Qwen3Config(**QWEN3_BODY), dtype, batch, prompt, 8, "cuda")
    measured = measured_cuda_peak_mb(QWEN3_BODY, dtype, batch, prompt, 8)
    assert measured == pytest.approx(predicted["total"], rel=0.10), predicted


@CUDA
def test_cuda_activations_grow_as_predicted():
    """From 1024 to 4096 prompt tokens at batch 8 in bfloat16 the activations (the mask and its
    per-group copies grow with T²) make most of the growth; the rest is the KV cache."""
    config = Qwen3Config(**QWEN3_BODY)
    before, after = (predict_peak_mb(config, "bfloat16", 8, prompt, 1, "cuda")
                     for prompt in (1024, 4096))
    predicted = after["total"] - before["total"]
    assert after["activations"] - before["activations"] >= 0.5 * predicted
    grown = (measured_cuda_peak_mb(QWEN3_BODY, "bfloat16", 8, 4096, 1)
             - measured_cuda_peak_mb(QWEN3_BODY, "bfloat16", 8, 1024, 1))
    assert grown == pytest.approx(predicted, rel=0.25)


LOAD = """
import resource, sys
from batched_reasoning.core.memory import process_rss_mb
from batched_reasoning.model.checkpoint import load_model
model = load_model(sys.argv[1])
print(process_rss_mb(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""
MANY_LAYERS = {  # 1.2 GB of float32 in tensors of at most 13 MB: a second copy would stand out
    "vocab_size": 8000, "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 8,
    "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 3072,
    "max_position_embeddings": 4096,
}


@pytest.mark.slow
def test_loading_a_checkpoint_holds_its_weights_once(tmp_path):
    """The peak of loading is what stays loaded. Pages of a memory-mapped file stay in the RSS
    while it is mapped: one mapping for every tensor peaked at a second copy of the weights
    above the loaded model (Qwen3-0.6B in float32: 4846 MB against 2572 MB once loaded,
    measured), which neither the memory model nor a job's memory request counts."""
    torch.manual_seed(0)
    config = Qwen3Config(**MANY_LAYERS)
    save_model(Qwen3(config), tmp_path / "model")
    out = subprocess.run([sys.executable, "-c", LOAD, str(tmp_path / "model")],
                         capture_output=True, text=True, check=True)
    loaded, peak = map(float, out.stdout.split())
    weights = parameter_count(config) * 4 / 2**20
    assert peak - loaded < 0.5 * weights, (peak, loaded, weights)
