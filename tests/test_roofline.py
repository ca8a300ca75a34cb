"""The roofline: a decode step's bytes and FLOPs counted from the model's real tensors, its
bound, and a profile that finds the step's products and attention by name."""


import pytest
import torch
from conftest import TINY, random_model

from batched_reasoning.bench import roofline
from batched_reasoning.model.config import Qwen3Config
from batched_reasoning.engine.kv_cache import KVCache
from batched_reasoning.bench.roofline import (
    KINDS,
    MachineLimits,
    bound_seconds,
    decode_step_work,
    kind_of,
    measure_machine,
    profile_decode_step,
)


@pytest.mark.parametrize("tied", [True, False])
def test_bytes_are_the_weights_once_and_each_rows_cache(tied):
    model = random_model(tie_word_embeddings=tied)
    batch, context = 3, 20
    weights = sum(p.numel() for p in model.parameters())  # a tied matrix is one parameter
    if not tied:
        weights -= model.model.embed_tokens.weight.numel()  # looked up, not read
    cache = KVCache.for_model(model, batch, context)
    read, flops = decode_step_work(model.cfg, "float32", batch, context)
    assert read == 4 * weights + cache.keys.nbytes + cache.values.nbytes
    attention = 2 * 2 * TINY["num_attention_heads"] * TINY["head_dim"] * context * TINY["num_hidden_layers"]
    assert flops == batch * (2 * weights + attention)


def test_the_bound_is_the_slower_of_reading_and_multiplying():
    cfg = Qwen3Config(**TINY)
    read, flops = decode_step_work(cfg, "bfloat16", 16, 100)
    slow_memory = MachineLimits(read_gb_s=read / 1e9, matmul_gflop_s=1e6)  # reading takes 1 s
    slow_matmul = MachineLimits(read_gb_s=1e6, matmul_gflop_s=flops / 2e9)  # multiplying, 2 s
    assert bound_seconds(cfg, "bfloat16", 16, 100, slow_memory) == pytest.approx(1.0)
    assert bound_seconds(cfg, "bfloat16", 16, 100, slow_matmul) == pytest.approx(2.0)
    limits = MachineLimits(read_gb_s=30, matmul_gflop_s=500)
    assert bound_seconds(cfg, "bfloat16", 1, 100, limits) < bound_seconds(cfg, "bfloat16", 16, 100, limits)
    assert bound_seconds(cfg, "bfloat16", 4, 10, limits) < bound_seconds(cfg, "bfloat16", 4, 400, limits)


def test_operators_are_sorted_into_kinds():
    assert kind_of("aten::_scaled_dot_product_flash_attention_for_cpu") == "attention"
    assert kind_of("aten::scaled_dot_product_attention") == "attention"
    assert kind_of("mkldnn::_linear_pointwise") == kind_of("aten::mm") == "matmul"
    assert kind_of("aten::argmax") == "sampling"
    assert kind_of("aten::rsqrt") == kind_of("aten::mul") == kind_of("aten::copy_") == "elementwise"
    # a compiled step: its graph is one region; dynamo's guards around it are host work
    assert kind_of("Torch-Compiled Region: 0/1") == kind_of("## Call CompiledFxGraph None ##") == "compiled"
    assert kind_of("TorchDynamo Cache Lookup") == kind_of("Pregraph bytecode") == "host"
    # its kernels, where inductor records them: fused kernels are named after what they fuse
    assert kind_of("aoti_torch_cpu__linear_pointwise") == kind_of("aoti_torch_cpu__mkl_linear") == "matmul"
    assert kind_of("aoti_torch_cpu__scaled_dot_product_flash_attention_for_cpu") == "attention"
    assert kind_of("graph_1_cpp_fused__linear_pointwise__to_copy_add_embedding_mean_mul_0") == "elementwise"


def test_a_profiled_step_finds_its_products_and_attention():
    model = random_model()
    step = profile_decode_step(model, batch=2, context=30, steps=3)
    kinds = [step[f"{kind}_ms"] for kind in KINDS]
    assert all(ms >= 0 for ms in kinds)
    assert step["matmul_ms"] > 0 and step["attention_ms"] > 0 and step["sampling_ms"] > 0
    assert sum(kinds) == pytest.approx(step["profiled_step_ms"], rel=1e-9)
    assert step["step_ms"] > 0


def test_the_machine_is_measured_in_bytes_and_flops_per_second(monkeypatch):
    """On a clock where every timed region takes exactly one second, the limits are the work
    itself: 64 MiB read (not 64e6 bytes), and 2 n^3 FLOPs for an n x n product (a multiply and
    an add per term), so a unit slip shows as a wrong number rather than a plausible one."""
    ticks = iter(range(1000))
    monkeypatch.setattr(roofline.machine.time, "perf_counter", lambda: float(next(ticks)))
    limits = measure_machine(torch.device("cpu"), torch.float32, read_mb=64, matmul_size=256,
                             repeats=2)
    assert limits.read_gb_s == 64 * 2**20 / 1e9
    assert limits.matmul_gflop_s == 2 * 256**3 / 1e9


def test_a_dtype_slower_than_float32_does_not_lower_the_machines_limit(monkeypatch):
    """bfloat16 on a CPU without AVX512-BF16 multiplies square products far slower than
    float32 (seconds for 2048², measured here under the AVX2 class), yet a product can always
    run in float32: the limit is the faster of the two, and it says which."""
    rates = {torch.bfloat16: 0.3, torch.float32: 340.0}
    monkeypatch.setattr(roofline.machine, "product_gflop_s", lambda device, dtype, size, repeats: rates[dtype])
    limits = measure_machine(torch.device("cpu"), torch.bfloat16, read_mb=1, repeats=1)
    assert (limits.matmul_gflop_s, limits.matmul_dtype) == (340.0, "float32")
    rates[torch.bfloat16] = 1900.0  # with AMX bfloat16 is the faster
    limits = measure_machine(torch.device("cpu"), torch.bfloat16, read_mb=1, repeats=1)
    assert (limits.matmul_gflop_s, limits.matmul_dtype) == (1900.0, "bfloat16")


@pytest.mark.parametrize("seconds_per_product, timed_side", [(1.0, 256), (1e-6, 2048)])
def test_a_dtype_too_slow_for_the_full_product_is_timed_smaller(monkeypatch, seconds_per_product,
                                                               timed_side):
    """A first 256² product estimates the rate; at one second for it (0.03 GFLOP/s, like
    bfloat16 without a native kernel) a 2048² product would take over eight minutes, so the
    timed one stays 256²; at a microsecond the full 2048² one is timed."""
    clock = iter(i * seconds_per_product for i in range(1000))
    monkeypatch.setattr(roofline.machine.time, "perf_counter", lambda: next(clock))
    rate = roofline.machine.product_gflop_s(torch.device("cpu"), torch.float32, 2048, repeats=2)
    assert rate == pytest.approx(2 * timed_side**3 / seconds_per_product / 1e9)


@pytest.mark.slow
def test_a_compiled_step_is_profiled_after_every_shape_is_compiled(monkeypatch):
    """`--compile on`: the decode table times the compiled step, and no timed or profiled
    step compiles (a first pass on a cache of its own traced every shape they reach)."""
    graphs_at_each_call = []
    decode_steps = roofline._decode_steps

    def counting(state, tokens, steps):
        tokens = decode_steps(state, tokens, steps)
        graphs_at_each_call.append(state.stepper.graphs)
        return tokens

    monkeypatch.setattr(roofline, "_decode_steps", counting)
    monkeypatch.setattr(roofline, "measure_machine",
                        lambda device, dtype: MachineLimits(read_gb_s=10, matmul_gflop_s=100))
    [row] = roofline.decode_table(random_model(), [2], 30, "float32", compile="on")
    assert row["decode_mode"] == "compiled"
    assert row["compiled_ms"] > 0
    assert sum(row[f"{kind}_ms"] for kind in KINDS) == pytest.approx(row["profiled_step_ms"])
    first_pass, *timed = graphs_at_each_call
    assert first_pass >= 2  # 17 steps from 30 cached positions: two length buckets
    assert timed == [first_pass] * 3  # warm-up, timed, profiled


def test_each_rows_bound_uses_the_limits_measured_right_after_its_step(monkeypatch):
    """The machine drifts over a bench run, so each row's bound comes from limits measured
    after that row's step, not from one measurement for all rows: here each measurement reads
    a different bandwidth, and each row's bound and recorded limits are its own."""
    events = []
    measured = iter([MachineLimits(read_gb_s=1e-3, matmul_gflop_s=1e9),
                     MachineLimits(read_gb_s=2e-3, matmul_gflop_s=1e9)])
    profile = roofline.profile_decode_step

    def profiled(*args, **kwargs):
        events.append("step")
        return profile(*args, **kwargs)

    def measure(device, dtype):
        events.append("measure")
        return next(measured)

    monkeypatch.setattr(roofline, "profile_decode_step", profiled)
    monkeypatch.setattr(roofline, "measure_machine", measure)
    model = random_model()
    rows = roofline.decode_table(model, [2, 1], 30, "float32")
    assert events == ["step", "measure", "step", "measure"]
    for row, read_gb_s in zip(rows, (1e-3, 2e-3)):
        limits = MachineLimits(read_gb_s=read_gb_s, matmul_gflop_s=1e9)
        assert row["read_gb_s"] == read_gb_s
        assert row["bound_ms"] == pytest.approx(
            1e3 * bound_seconds(model.cfg, "float32", row["batch_size"], 30, limits))
