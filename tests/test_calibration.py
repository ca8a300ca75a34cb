"""Kernel choices are measured once per machine, kept in the wisdom file, and change no result
beyond rounding."""

import json

import pytest
import torch
import torch.nn.functional as F
from conftest import PAD, random_model

from batched_reasoning.core import calibration
from batched_reasoning.core.provenance import run_info
from batched_reasoning.engine.generation import generate
from batched_reasoning.model import attention, kernels
from batched_reasoning.engine.compiled import Eager
from batched_reasoning.engine.decode import DecodeState
from batched_reasoning.engine.kv_cache import SlotCache
from batched_reasoning.model.attention import fused_attention

SHAPE = (torch.bfloat16, 4, 2, 16)
NAME = "decode_attention/bfloat16/4x2x16"


@pytest.fixture
def wisdom(tmp_path, monkeypatch):
    """A fresh wisdom file and a process that has made no choice yet."""
    path = tmp_path / "cache" / "wisdom.json"
    monkeypatch.setenv(calibration.WISDOM_ENV, str(path))
    monkeypatch.setattr(calibration, "_made", {})
    return path


def test_a_choice_is_measured_once_and_then_read(wisdom, monkeypatch):
    first = attention.decode_attention_in_float32(*SHAPE)
    record = json.loads(wisdom.read_text())[calibration.machine_key()][NAME]
    assert record["choice"] == ("float32" if first else "native")
    assert record["native_ms"] > 0 and record["float32_ms"] > 0
    assert (record["float32_ms"] < record["native_ms"]) == first
    # a later process reads the file: flip the stored choice and it is what it gets
    flipped = json.loads(wisdom.read_text())
    flipped[calibration.machine_key()][NAME]["choice"] = "native" if first else "float32"
    wisdom.write_text(json.dumps(flipped))
    monkeypatch.setattr(calibration, "_made", {})
    assert attention.decode_attention_in_float32(*SHAPE) is not first
    assert calibration.choices_made() == {NAME: "native" if first else "float32"}
    assert run_info({}, torch.device("cpu"), "stages.evaluate")["kernel_choices"] == \
        calibration.choices_made()


def test_float32_needs_no_choice_and_writes_nothing(wisdom):
    assert not attention.decode_attention_in_float32(torch.float32, 4, 2, 16)
    assert not wisdom.exists() and calibration.choices_made() == {}


def test_an_unreadable_wisdom_file_is_measured_over(wisdom, capsys):
    wisdom.parent.mkdir(parents=True)
    wisdom.write_text("{not json")
    attention.decode_attention_in_float32(*SHAPE)
    assert "ignoring unreadable wisdom file" in capsys.readouterr().err
    assert NAME in json.loads(wisdom.read_text())[calibration.machine_key()]


def test_a_cache_folder_it_cannot_write_costs_only_a_warning(tmp_path, monkeypatch, capsys):
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the folder should be
    monkeypatch.setenv(calibration.WISDOM_ENV, str(blocked / "wisdom.json"))
    monkeypatch.setattr(calibration, "_made", {})
    attention.decode_attention_in_float32(*SHAPE)
    assert "cannot keep wisdom" in capsys.readouterr().err
    assert NAME in calibration.choices_made()


def force(choice: str, monkeypatch):
    monkeypatch.setattr(calibration, "choose", lambda name, measure: {"choice": choice})


def test_decode_attention_takes_the_chosen_kernel_and_float32_rounds_only_once(monkeypatch):
    """The inputs are exact in float32, so the float32 kernel's only rounding of note is the
    final one to bfloat16: within half an ulp (2^-9 relative) of the float64 result."""
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(3, 4, 1, 16, generator=generator).bfloat16()
    k, v = (torch.randn(3, 2, 40, 16, generator=generator).bfloat16() for _ in range(2))
    mask = torch.ones(3, 1, 1, 40, dtype=torch.bool)
    mask[1, ..., :9] = False
    exact = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask,
                                           enable_gqa=True)
    in_float32 = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask,
                                                enable_gqa=True).bfloat16()
    native = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    assert not torch.equal(in_float32, native)  # so the checks below tell the kernels apart
    assert (in_float32.double() - exact).abs().max() <= 2**-8 * exact.abs().max()
    assert torch.equal(fused_attention(q, k, v, mask, in_float32=True), in_float32)
    assert torch.equal(fused_attention(q, k, v, mask), native)
    # a generation call resolves the choice once, for every layer and step (`DecodeState`)
    model = random_model().to(torch.bfloat16)
    for choice in ("float32", "native"):
        force(choice, monkeypatch)
        state = DecodeState.empty_slots(model, SlotCache.for_model(model, 2, 16), Eager())
        assert state.in_float32 is (choice == "float32")


class FakeClock:
    """`time` as `median_ms` sees it: a call of `size` units takes exactly `fixed_ms` plus
    `per_unit_ms` a unit."""

    def __init__(self, fixed_ms: float, per_unit_ms: float):
        self.now, self.fixed_ms, self.per_unit_ms = 0.0, fixed_ms, per_unit_ms

    def perf_counter(self) -> float:
        return self.now

    def call(self, size: int) -> None:
        self.now += (self.fixed_ms + self.per_unit_ms * size) / 1000


@pytest.mark.parametrize("fixed_ms, per_unit_ms, cost", [
    (71.0, 0.82, 87),  # Qwen3-0.6B bfloat16 prefill on this project's Xeon: 71 ms + 0.82 a token
    (103.0, 3.3, 31),  # the same in float32
    (0.0, 0.5, 0),
    (2.0, 0.0, calibration.UNMEASURABLE_CALL_COST),  # time that does not grow: never split
])
def test_a_call_cost_is_its_fixed_time_in_units_of_work(wisdom, monkeypatch, fixed_ms,
                                                        per_unit_ms, cost):
    clock = FakeClock(fixed_ms, per_unit_ms)
    monkeypatch.setattr(calibration, "time", clock)
    assert calibration.call_cost("some_call", lambda: clock.call, 1, 65) == cost
    record = json.loads(wisdom.read_text())[calibration.machine_key()]["some_call"]
    assert record["small_ms"] == pytest.approx(fixed_ms + per_unit_ms)
    assert record["large_ms"] == pytest.approx(fixed_ms + 65 * per_unit_ms)


@pytest.mark.parametrize("packed_ms, pack_from", [
    ({1: 9, 2: 9, 4: 9, 8: 9, 16: 9}, None),  # plain faster everywhere
    ({1: 3, 2: 4, 4: 5, 8: 6, 16: 7}, 1),  # packed faster everywhere
    ({1: 9, 2: 9, 4: 7, 8: 6, 16: 7}, 4),
    ({1: 9, 2: 7, 4: 9, 8: 7, 16: 7}, 8),  # faster at 2 rows, but not at 4: from 8
    ({1: 3, 2: 3, 4: 3, 8: 3, 16: 9}, None),  # slower at the most rows timed: never
])
def test_packing_pays_from_the_fewest_rows_it_wins_at_every_larger_count(packed_ms, pack_from):
    plain_ms = {1: 5, 2: 5, 4: 8, 8: 8, 16: 8}
    assert kernels.first_faster(plain_ms, packed_ms) == pack_from


@pytest.mark.parametrize("recorded, packs_at", [(2, {1: False, 2: True, 16: True}),
                                                (None, {1: False, 16: False})])
def test_a_model_packs_as_this_machine_timed_it(wisdom, monkeypatch, recorded, packs_at):
    """`pack_for_inference` times (or reads) from how many rows packing pays for its dtype and
    layer shape, and follows it: flip the kept choice and the next process packs accordingly."""
    random_model().pack_for_inference(batch_size=1)
    [name] = [n for n in calibration.choices_made() if n.startswith("pack_from_rows/float32/")]
    record = json.loads(wisdom.read_text())[calibration.machine_key()][name]
    assert record["choice"] == kernels.first_faster(
        *({int(rows): ms for rows, ms in record[kind].items()} for kind in ("plain_ms", "packed_ms")))
    kept = json.loads(wisdom.read_text())
    kept[calibration.machine_key()][name]["choice"] = recorded
    wisdom.write_text(json.dumps(kept))
    monkeypatch.setattr(calibration, "_made", {})
    for batch_size, packs in packs_at.items():
        assert random_model().pack_for_inference(batch_size=batch_size) is packs
    assert calibration.choices_made() == {name: recorded}


@pytest.mark.parametrize("strategy, timed", [("batched_stop", {"prefill_call"}),
                                             ("continuous", {"prefill_call"})])
def test_generation_times_its_call_costs_once_and_records_them(wisdom, strategy, timed):
    model = random_model()
    prompts = [[5, 6, 7], [5, 6, 7, 8, 9, 10, 11]]
    generate(model, prompts, strategy=strategy, batch_size=2, max_new_tokens=3,
             eos_token_id=None, pad_token_id=PAD)
    made = calibration.choices_made()
    assert {name.split("/")[0] for name in made} == timed
    assert all(isinstance(cost, int) and cost >= 0 for cost in made.values())
    assert set(json.loads(wisdom.read_text())[calibration.machine_key()]) == set(made)
