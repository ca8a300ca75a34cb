"""Kernel choices are measured once per machine, kept in the wisdom file, and change no result
beyond rounding."""

import json

import pytest
import torch
import torch.nn.functional as F

from batched_reasoning import calibration
from batched_reasoning.kv_cache import fused_attention
from batched_reasoning.provenance import run_info

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
    first = calibration.decode_attention_in_float32(*SHAPE)
    record = json.loads(wisdom.read_text())[calibration.machine_key()][NAME]
    assert record["choice"] == ("float32" if first else "native")
    assert record["native_ms"] > 0 and record["float32_ms"] > 0
    assert (record["float32_ms"] < record["native_ms"]) == first
    # a later process reads the file: flip the stored choice and it is what it gets
    flipped = json.loads(wisdom.read_text())
    flipped[calibration.machine_key()][NAME]["choice"] = "native" if first else "float32"
    wisdom.write_text(json.dumps(flipped))
    monkeypatch.setattr(calibration, "_made", {})
    assert calibration.decode_attention_in_float32(*SHAPE) is not first
    assert calibration.choices_made() == {NAME: "native" if first else "float32"}
    assert run_info({}, torch.device("cpu"), "evaluate")["kernel_choices"] == \
        calibration.choices_made()


def test_float32_needs_no_choice_and_writes_nothing(wisdom):
    assert not calibration.decode_attention_in_float32(torch.float32, 4, 2, 16)
    assert not wisdom.exists() and calibration.choices_made() == {}


def test_an_unreadable_wisdom_file_is_measured_over(wisdom, capsys):
    wisdom.parent.mkdir(parents=True)
    wisdom.write_text("{not json")
    calibration.decode_attention_in_float32(*SHAPE)
    assert "ignoring unreadable wisdom file" in capsys.readouterr().err
    assert NAME in json.loads(wisdom.read_text())[calibration.machine_key()]


def test_a_cache_folder_it_cannot_write_costs_only_a_warning(tmp_path, monkeypatch, capsys):
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the folder should be
    monkeypatch.setenv(calibration.WISDOM_ENV, str(blocked / "wisdom.json"))
    monkeypatch.setattr(calibration, "_made", {})
    calibration.decode_attention_in_float32(*SHAPE)
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
    force("float32", monkeypatch)
    assert torch.equal(fused_attention(q, k, v, mask), in_float32)
    force("native", monkeypatch)
    assert torch.equal(fused_attention(q, k, v, mask), native)
