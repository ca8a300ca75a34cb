"""How decode steps run: eagerly, compiled with `torch.compile`, or replayed as CUDA graphs.

A stepper is called with a `DecodeState` and the step's input ids and returns the logits; it
also decides which rows leave the batch (`rows_to_keep`). The compiled ones bucket the shapes
(`decode.power_of_two_at_least`) so that a run traces a bounded number of graphs, count them
(`graphs`) and time their first calls (`compile_seconds`: tracing, compiling, capturing).
"""

from __future__ import annotations

import sys
import time

import torch

from ..core import calibration
from ..core.devices import synchronize
from .decode import (SMALLEST_LENGTH_BUCKET, DecodeState, decode_step, graph_bound,
                     power_of_two_at_least)

MODES = ("off", "auto", "on")
# Graphs of the decode step one process may trace (`torch._dynamo`'s per-function limit):
# a few runs' worth of `decode.graph_bound`.
RECOMPILE_LIMIT = 256
# What `auto` assumes a graph costs at least before it measures: a run whose whole eager decode
# is shorter than this a graph is left eager without compiling anything. The toy's 3-layer step
# took 22 s to compile in a fresh process on a 2-vCPU Xeon, 25 s on a 2-vCPU AMD EPYC (the
# first measurement on a machine pays inductor's cold caches), and 1-4 s a graph with them
# warm; below 5 s a graph, compiling is at best a wash.
MIN_COMPILE_SECONDS = 5.0
# What measuring costs a run (one graph compiled in a fresh process, as above, and both steps
# timed): a run whose whole eager decode is shorter cannot pay for the measurement either, so
# it stays eager without it. (The default run's batch-1 curve point, about 15 s of eager decode
# by this estimate, spent 25 s measuring on that AMD EPYC to decide to stay eager.)
MEASURE_SECONDS = 30.0
# Rows at which `auto` times a compiled against an eager step (once per machine and model).
MEASURE_ROWS = 8


class Eager:
    """Exact shapes: attention over the longest row's keys; finished rows leave at once."""

    name = "eager"
    reads_past_end = False  # attends over the longest row's keys only
    graphs = 0
    compile_seconds = 0.0

    def __call__(self, state, ids: torch.Tensor) -> torch.Tensor:
        return state.eager_step(ids)

    def capacity(self, positions: int) -> int:
        return positions

    def rows_to_keep(self, live: list[int], rows: int) -> list[int]:
        return live


class Bucketed:
    """Shapes rounded up to powers of two, one graph per (rows, length bucket)."""

    reads_past_end = True  # attends up to the length bucket's end, past the longest row

    def __init__(self):
        self.shapes: set[tuple[int, int]] = set()
        self.compile_seconds = 0.0
        self.failed = False  # compiling failed once: the rest of the run is eager

    @property
    def graphs(self) -> int:
        return len(self.shapes)

    def capacity(self, positions: int) -> int:
        """Caches are made a power of two long, so every length bucket fits (at most twice
        the key/value memory the run needs)."""
        return power_of_two_at_least(positions, SMALLEST_LENGTH_BUCKET)

    def rows_to_keep(self, live: list[int], rows: int) -> list[int]:
        """Finished rows stay (masked placeholders) until the live ones fit the next smaller
        batch bucket; then the batch shrinks to that bucket, live rows first."""
        bucket = power_of_two_at_least(len(live))
        if bucket >= rows or not live:
            return list(range(rows)) if live else []
        finished = [row for row in range(rows) if row not in set(live)]
        return sorted(live + finished[:bucket - len(live)])

    @staticmethod
    def length_bucket(state) -> int:
        return power_of_two_at_least(max(state.lengths) + 1, SMALLEST_LENGTH_BUCKET)

    def __call__(self, state, ids: torch.Tensor) -> torch.Tensor:
        if self.failed:
            return state.eager_step(ids)
        end = self.length_bucket(state)
        shape = (state.rows, end)
        if shape in self.shapes:
            return self.run(state, ids, end)
        synchronize(state.keys.device)
        start = time.perf_counter()
        saved = [t.clone() for t in (state.key_valid, state.write_at, state.rope_pos)]
        try:
            logits = self.run(state, ids, end)
        except Exception as error:  # noqa: BLE001 - any failure to compile means: run eagerly
            self.failed = True
            self.name = "eager"
            print(f"compile: cannot compile the decode step ({type(error).__name__}: "
                  f"{str(error).strip().splitlines()[0][:200] if str(error).strip() else ''}); "
                  "decoding eagerly", file=sys.stderr, flush=True)
            for tensor, value in zip((state.key_valid, state.write_at, state.rope_pos), saved):
                tensor.copy_(value)
            return state.eager_step(ids)
        synchronize(state.keys.device)
        self.compile_seconds += time.perf_counter() - start
        self.shapes.add(shape)
        return logits


_compiled_step = None  # `decode_step` under torch.compile, shared by the whole process
_compiled_weights = None  # `weights_key` of the model whose weights its graphs hold
# Inductor's options for an inference-only model's CPU step (`Qwen3.pack_for_inference`):
# `freezing` takes the weights (packed for oneDNN or not) into the graph as constants, which
# lets it compile around our packed products and fuse the small kernels between them;
# `cpp_wrapper` calls the kernels from C++ instead of Python. A packed bfloat16 Qwen3-0.6B step
# at 124 cached positions took 59.2 instead of 70.4 ms at batch 1, 74.7 instead of 85.8 ms at
# 8 (2-vCPU Xeon, AMX). Not `cpp.weight_prepack`: it packs every weight it finds plain into
# each graph as that graph's own constant, a copy of the whole model per graph in float32
# (+2.5-2.7 GB a graph at Qwen3-0.6B's shape; a run compiles up to `decode.graph_bound`
# graphs); the model packs its weights once instead, where packing pays. A model that trains
# (GRPO's policy) compiles with its weights as the graph's inputs: its graphs outlive its
# optimizer steps.
CPU_OPTIONS = {"freezing": True, "cpp_wrapper": True, "cpp.weight_prepack": False}


def weights_key(model) -> tuple:
    """What a frozen graph's weights depend on: the model and every parameter's storage and
    version (an in-place update, an optimizer step, bumps it). Graphs that read the weights as
    inputs depend on none of it."""
    if not model.inference_only:
        return ("weights as inputs",)
    return id(model), tuple((p.data_ptr(), p._version) for p in model.parameters())


class Compiled(Bucketed):
    """`decode_step` through `torch.compile` (inductor, whole graph, static shapes; an
    inference-only model's weights frozen into the graphs). Graphs live as long as the process:
    a later generation call with the same shapes (and, frozen, the same model and weights)
    replays them and counts none as new; a frozen graph of other weights is discarded first,
    since it would go on computing with the old ones."""

    name = "compiled"

    def __init__(self, model):
        super().__init__()
        global _compiled_step, _compiled_weights
        if _compiled_step is None:
            _compiled_step = torch.compile(decode_step, fullgraph=True, dynamic=False)
        # One graph per shape is the design (`decode.graph_bound`), not a recompilation storm.
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit,
                                                   RECOMPILE_LIMIT)
        key = weights_key(model)
        if key != _compiled_weights:
            torch._dynamo.reset()
            model.__dict__.pop("_traced_decode_shapes", None)
            _compiled_weights = key

    def __call__(self, state, ids: torch.Tensor) -> torch.Tensor:
        # the shapes this model's step was traced at, in this process
        traced = state.model.__dict__.setdefault("_traced_decode_shapes", set())
        shape = (state.rows, self.length_bucket(state), state.in_float32)
        if shape in traced:
            self.shapes.add(shape[:2])
        logits = super().__call__(state, ids)
        traced.add(shape)
        return logits

    def run(self, state, ids, end):
        # (as a config patch: torch.compile's `options` does not reach inductor's freezing)
        with torch._inductor.config.patch(CPU_OPTIONS if state.model.inference_only else {}):
            return _compiled_step(state.model, ids, state.keys, state.values, state.key_valid,
                                  state.write_at, state.rope_pos, end, True, state.in_float32)


class CudaGraphs(Bucketed):
    """`decode_step` captured as one CUDA graph per (rows, length bucket) and replayed, as
    vLLM and sglang do for decoding: a step is one launch instead of a thousand. A graph reads
    and writes fixed addresses, so the state's tensors must stay views at the same place
    (`DecodeState.keep` moves rows in place) and the ids go through a static input buffer."""

    name = "cuda-graphs"

    def __init__(self):
        super().__init__()
        self.captured: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]] = {}
        self.pool = None
        self.addresses: tuple = ()
        self.captures = 0  # one per (cache, shape): a new cache is captured anew

    def run(self, state, ids, end):
        shape = (state.rows, end)
        addresses = tuple(t.data_ptr() for t in (state.keys, state.values, state.key_valid,
                                                 state.write_at, state.rope_pos))
        if addresses != self.addresses:  # a new cache: graphs of the old one read freed memory
            self.captured.clear()
            self.addresses = addresses
        if shape not in self.captured:
            self.captured[shape] = self.capture(state, ids, end)
        graph, static_ids, logits = self.captured[shape]
        static_ids.copy_(ids)
        graph.replay()
        return logits

    @property
    def graphs(self) -> int:
        return self.captures

    def capture(self, state, ids, end):
        """Warm up on a side stream (kernels choose their algorithms), then capture, leaving
        the state as one real step would: the warm-up's writes are undone first."""
        saved = [t.clone() for t in (state.key_valid, state.write_at, state.rope_pos)]
        static_ids = ids.clone()
        args = lambda: (state.model, static_ids, state.keys, state.values, state.key_valid,  # noqa: E731
                        state.write_at, state.rope_pos, end, True, state.in_float32)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            decode_step(*args())
        torch.cuda.current_stream().wait_stream(stream)
        self.restore(state, saved)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            logits = decode_step(*args())
        self.pool = graph.pool()
        self.captures += 1
        self.restore(state, saved)
        return graph, static_ids, logits

    @staticmethod
    def restore(state, saved) -> None:
        for tensor, value in zip((state.key_valid, state.write_at, state.rope_pos), saved):
            tensor.copy_(value)


def compiled_for(model):
    """The compiled stepper for `model`'s device, or None (with one log line) where none
    can run."""
    device = model.device
    if device.type == "cuda":
        return CudaGraphs()
    if device.type != "cpu":
        print(f"compile: no compiled decode step on {device.type}; decoding eagerly",
              file=sys.stderr, flush=True)
        return None
    return Compiled(model)


def resolve(model, mode: str, batch_size: int, capacity: int, expected_steps: int) -> str:
    """`off` or `on`: `auto` decided by `compile_pays` for a run of `expected_steps` decode
    steps of `batch_size` rows over `capacity` positions."""
    if mode not in MODES:
        raise ValueError(f"compile must be one of {MODES}, got {mode!r}")
    if mode == "auto":
        return "on" if compile_pays(model, batch_size, capacity, expected_steps) else "off"
    return mode


def choose_stepper(model, mode: str, batch_size: int, capacity: int, expected_steps: int):
    """The stepper for a generation call: `off` eager, `on` compiled where the device has a
    compiled step (else eager, said once), `auto` as `resolve` decides."""
    if resolve(model, mode, batch_size, capacity, expected_steps) == "on":
        return compiled_for(model) or Eager()
    return Eager()


def compile_pays(model, batch_size: int, capacity: int, expected_steps: int) -> bool:
    """Whether `expected_steps` compiled decode steps of `batch_size` rows save more time than
    compiling their graphs (at most `decode.graph_bound`) costs on this machine.

    First a bound that needs no compiling: if the whole eager decode (its step timed here, on a
    scratch cache) is shorter than `MIN_COMPILE_SECONDS` a graph, or than `MEASURE_SECONDS`,
    nothing can pay. Otherwise the compile time and both step times are measured once per
    machine, model shape and dtype (`calibration`, at `MEASURE_ROWS` rows) and weighed.
    """
    graphs = graph_bound(batch_size, capacity)
    eager_ms = calibration.median_ms({"eager": scratch_steps(model, Eager(), batch_size)},
                                     repeats=5)["eager"]
    if expected_steps * eager_ms / 1000 <= max(MIN_COMPILE_SECONDS * graphs, MEASURE_SECONDS):
        return False
    cfg = model.cfg
    name = (f"decode_compile/{model.device.type}/{str(model.dtype).removeprefix('torch.')}/"
            f"{'packed' if model.packed else 'plain'}/{cfg.num_hidden_layers}x"
            f"{cfg.hidden_size}x{cfg.intermediate_size}x{cfg.vocab_size}")
    record = calibration.choose(name, lambda: measure_compile(model))
    saved_seconds = expected_steps * (record["eager_ms"] - record["compiled_ms"]) / 1000
    return saved_seconds > record["compile_seconds"] * graphs


def measure_compile(model) -> dict:
    """One graph's compile time and the eager and compiled step times at `MEASURE_ROWS` rows."""
    stepper = compiled_for(model)
    if stepper is None:
        return {"choice": False, "compile_seconds": float("inf"), "eager_ms": 0.0,
                "compiled_ms": 0.0}
    compiled_step = scratch_steps(model, stepper, MEASURE_ROWS)
    compiled_step()
    if stepper.failed:  # said once already; never again on this machine
        return {"choice": False, "compile_seconds": float("inf"), "eager_ms": 0.0,
                "compiled_ms": 0.0, "failed": True}
    ms = calibration.median_ms({"eager": scratch_steps(model, Eager(), MEASURE_ROWS),
                                "compiled": compiled_step}, repeats=7)
    return {"choice": ms["compiled"] < ms["eager"], "rows": MEASURE_ROWS,
            "compile_seconds": round(stepper.compile_seconds, 3),
            "eager_ms": round(ms["eager"], 4), "compiled_ms": round(ms["compiled"], 4)}


def scratch_steps(model, stepper, rows: int):
    """A call that runs one decode step of `rows` rows on a scratch cache of
    `SMALLEST_LENGTH_BUCKET` positions, each call at the same length."""
    length = SMALLEST_LENGTH_BUCKET // 2
    cfg = model.cfg
    shape = (cfg.num_hidden_layers, rows, cfg.num_key_value_heads, SMALLEST_LENGTH_BUCKET,
             cfg.head_dim)
    keys = torch.zeros(shape, dtype=model.dtype, device=model.device)
    values = torch.zeros_like(keys)
    key_valid = torch.zeros(rows, SMALLEST_LENGTH_BUCKET, dtype=torch.bool, device=model.device)
    key_valid[:, :length] = True
    state = DecodeState(model, keys, values, key_valid, [length] * rows,
                        torch.full((rows,), length), stepper)
    ids = [0] * rows

    @torch.inference_mode()
    def step() -> None:
        with model.decoding(SMALLEST_LENGTH_BUCKET):
            state.step(ids)
            synchronize(model.device)
        state.write_at -= 1
        state.rope_pos -= 1
        state.lengths = [length] * rows
        state.key_valid[:, length] = False
    return step
