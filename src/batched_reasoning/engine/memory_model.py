"""Peak memory of batched generation, predicted from the model's shape before anything runs.

Why: to pick the largest batch size that fits a memory budget without trying (and crashing).
The prediction adds up what is alive at the worst moment, the prefill of a full batch:

- weights: every parameter once (tied embeddings are one tensor), and for a model packed for
  inference on CPU (`Qwen3.pack_for_inference`) a tied output projection twice: the lookup reads
  the plain embedding, the product its packed copy.
- kv_cache: keys and values of every layer for batch x (prompt_len + max_new_tokens) positions,
  allocated in full by `generate` before the prefill.
- activations: the largest tensors alive at once inside one layer during prefill (of the batch's
  distinct prompts: repeats of a prompt share its prefill, `generation.share_prompts`): the residual
  stream and its normed copy; attention's queries, keys, values and the rotary-embedding
  temporaries of the queries; the MLP's gate, up and their product (each batch x prompt_len x
  intermediate); and the causal-and-padding mask (batch x T x T). On CUDA the caching allocator
  reuses attention's freed blocks for the MLP, so the larger of the two counts; attention there
  is the fused memory-efficient kernel on grouped-query heads folded into the query length
  (`attention.folded_attention`): no T x T scores, but a copy of the queries, the mask repeated
  per group (batch x groups x T x T) and the kernel's additive copy of it in the model's dtype
  (and one padded to a multiple of 16 key columns). This CUDA count follows PyTorch's code; it
  has not yet been held against a GPU's allocator peak (tests/test_memory_model.py does that
  where a GPU exists). On CPU the fused attention kernel works block by block (no T x T scores,
  but a float copy of the mask), and the C allocator does not hand attention's freed blocks to
  the MLP's larger tensors, so attention and MLP add up.
- logits: batch x vocab float32 scores of one position (prefill projects only the last one);
  on CPU twice that for the batch sizes whose product `kernels.Linear` computes transposed (its
  result is made contiguous in a copy).
- runtime: what the process holds besides tensors (CPU only; the CUDA allocator's peak, which
  `memory.PeakMemory` reports there, counts tensors alone): its RSS apart from the weights
  (`baseline_mb`) plus the first forward pass's thread pools and kernel buffers.

CPU figures are process RSS, so constants calibrated on this project's CPU machine (torch 2.13,
2 threads) against `memory.PeakMemory` around `generate(strategy="batched")` carry what the
shapes cannot: `CPU_IMPORTS_MB`, the RSS after `import torch` and this package (the baseline
when none is measured), `CPU_FIRST_PASS_MB`, and `CPU_ALLOCATOR_OVERHEAD`, the factor by which
heap fragmentation inflates the activations' RSS (the allocator keeps freed blocks). Against
the kernel's exact peak (`bench.memory`, Qwen3-0.6B's shape in float32, the first 1-16 MATH-500
prompts, 32 new tokens) the total was 0 to 3% under the peak at batch 1-4 and 5-15% over it at
8-16 (2 threads; 1 thread with AVX2 kernels: up to 15%): the activations' factor, fitted on
smaller models, is generous at this width, which errs on the safe side for a budget. A process
that holds more (a workflow job also imports Snakemake's script runtime and math-verify, and
loading a checkpoint pulls in more of torch) passes its measured RSS after loading the model,
minus the weights, as `baseline_mb`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core.memory import process_rss_mb
from ..model.config import Qwen3Config
from ..model.kernels import SMALL_ROW_PRODUCTS, Linear

MB = 2**20
DTYPE_BYTES = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2}
CPU_IMPORTS_MB = 221.0
CPU_FIRST_PASS_MB = 13.0
# A workflow job's RSS apart from the weights (its `baseline_memory_mb`): torch, this package,
# Snakemake's script runtime, math-verify, and what loading a checkpoint imports.
CPU_WORKFLOW_JOB_MB = 310.0
CPU_ALLOCATOR_OVERHEAD = 1.3


def parameter_count(config: Qwen3Config) -> int:
    c = config
    attention = c.hidden_size * c.head_dim * (2 * c.num_attention_heads + 2 * c.num_key_value_heads)
    if c.attention_bias:
        attention += c.head_dim * (c.num_attention_heads + 2 * c.num_key_value_heads) + c.hidden_size
    mlp = 3 * c.hidden_size * c.intermediate_size
    norms = 2 * c.hidden_size + 2 * c.head_dim
    embeddings = c.vocab_size * c.hidden_size * (1 if c.tie_word_embeddings else 2)
    return embeddings + c.num_hidden_layers * (attention + mlp + norms) + c.hidden_size


def _activation_bytes(c: Qwen3Config, size: int, batch: int, time: int, device_type: str) -> float:
    tokens = batch * time
    query, kv = c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
    residual = 2 * tokens * c.hidden_size * size
    attention = tokens * (4 * query + 3 * kv) * size
    mlp = 3 * tokens * c.intermediate_size * size
    if device_type == "cpu":
        mask = batch * time * time * (1 + 4)  # boolean, and the kernel's float copy
        return CPU_ALLOCATOR_OVERHEAD * (residual + attention + mlp + mask)
    # The fused kernel keeps no scores; the group's query heads are folded into the query length
    # (`attention.folded_attention`): a copy of the queries, the mask repeated per group, and
    # the kernel's additive copy of that mask in the model's dtype, padded to 16 key columns.
    groups = c.num_attention_heads // c.num_key_value_heads
    if groups > 1:
        attention += tokens * query * size + batch * groups * time * time
    attention += 2 * batch * groups * time * -(-time // 16) * 16 * size
    return residual + max(attention, mlp) + batch * time * time


def predict_peak_mb(
    config: Qwen3Config,
    dtype: str,
    batch_size: int,
    prompt_len: int,
    max_new_tokens: int,
    device_type: str,
    baseline_mb: float | None = None,
    distinct_prompts: int | None = None,
    packed: bool = False,
) -> dict[str, float]:
    """Predicted peak memory (MiB) of generating for `batch_size` prompts of `prompt_len` tokens,
    by component, with their sum as `total`. `baseline_mb`: the process's RSS apart from the
    weights (CPU; default `CPU_IMPORTS_MB`). `distinct_prompts`: how many of a batch's prompts
    differ (default: all); only they are prefilled, each repeat gets a copy of the keys/values.
    `packed`: the model's weights are packed for inference (`Qwen3.pack_for_inference`)."""
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {sorted(DTYPE_BYTES)}")
    if device_type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"unknown device type {device_type!r}; choose cpu, cuda or mps")
    c, size = config, DTYPE_BYTES[dtype]
    positions = prompt_len + max_new_tokens
    kv_cache = 2 * c.num_hidden_layers * batch_size * c.num_key_value_heads * positions * c.head_dim
    runtime = 0.0
    if device_type == "cpu":
        runtime = (CPU_IMPORTS_MB if baseline_mb is None else baseline_mb) + CPU_FIRST_PASS_MB
    packed_copy = c.vocab_size * c.hidden_size if packed and c.tie_word_embeddings else 0
    parts = {
        "weights": (parameter_count(c) + packed_copy) * size / MB,
        "kv_cache": kv_cache * size / MB,
        "activations": _activation_bytes(c, size, distinct_prompts or batch_size, prompt_len,
                                         device_type) / MB,
        "logits": batch_size * c.vocab_size * 4 / MB * (
            2 if device_type == "cpu" and batch_size in SMALL_ROW_PRODUCTS else 1),
        "runtime": runtime,
    }
    parts["total"] = sum(parts.values())
    return parts


def predict_training_mb(
    config: Qwen3Config, dtype: str, rows: int, sequence_len: int, device_type: str,
) -> dict[str, float]:
    """A rough peak (MiB) of one training step on `rows` sequences of `sequence_len` tokens, for
    scheduler requests (not measured like `predict_peak_mb`).

    weights, gradients and AdamW's two moments are four copies of the parameters; activations
    are what autograd keeps per token and layer (about 16 hidden-size and 4 intermediate-size
    vectors) plus the float32 logits and their log-softmax.
    """
    c, size = config, DTYPE_BYTES[dtype]
    tokens = rows * sequence_len
    per_layer = (16 * c.hidden_size + 4 * c.intermediate_size) * size
    parts = {
        "weights": parameter_count(c) * size / MB,
        "gradients_and_optimizer": 3 * parameter_count(c) * size / MB,
        "activations": tokens * c.num_hidden_layers * per_layer / MB,
        "logits": 2 * tokens * c.vocab_size * 4 / MB,
        "runtime": CPU_WORKFLOW_JOB_MB if device_type == "cpu" else 0.0,
    }
    parts["total"] = sum(parts.values())
    return parts


def largest_batch_that_fits(
    config: Qwen3Config,
    dtype: str,
    budget_mb: float,
    prompt_len: int,
    max_new_tokens: int,
    device_type: str,
    candidates: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128, 256),
) -> int | None:
    """The largest candidate batch size whose predicted peak fits `budget_mb`; None if none does."""
    fitting = [
        b for b in candidates
        if predict_peak_mb(config, dtype, b, prompt_len, max_new_tokens, device_type)["total"]
        <= budget_mb
    ]
    return max(fitting, default=None)


def baseline_mb(model) -> float | None:
    """What this process holds besides `model`'s weights (imports, loading machinery): its RSS
    minus the weights, the memory model's base on CPU. None on CUDA, where peaks count tensors."""
    if model.device.type != "cpu":
        return None
    return process_rss_mb() - weights_mb(model)


def weights_mb(model) -> float:
    """The size of `model`'s weights, plain or packed for inference (MiB)."""
    packed = [m.packed for m in model.modules() if isinstance(m, Linear) and m.packed is not None]
    return sum(t.numel() * t.element_size() for t in [*model.parameters(), *packed]) / 2**20
