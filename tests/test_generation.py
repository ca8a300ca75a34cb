"""Batched generation must reproduce sequential generation token for token (float32)."""

import copy
import random

import pytest
import torch
from conftest import EOS, PAD

from batched_reasoning.generation import STRATEGIES, generate
from batched_reasoning.padding import left_pad, length_sorted
from batched_reasoning.sampling import TopP


def varied_prompts(n=8, seed=0):
    rng = random.Random(seed)
    lengths = [1, 117, 5, 64, 2, 33, 90, 12, 7, 50][:n]
    return [[rng.randrange(4, 97) for _ in range(length)] for length in lengths]


def run(eos_model, prompts, strategy, batch_size, **kw):
    kw = dict(max_new_tokens=24, eos_token_id=EOS, pad_token_id=PAD) | kw
    return generate(eos_model, prompts, strategy=strategy, batch_size=batch_size, **kw)


def test_rows_end_at_different_steps(eos_model):
    tokens = run(eos_model, varied_prompts(), "sequential", 1).tokens
    assert len({len(t) for t in tokens}) >= 3, "test needs rows that end at different steps"


@pytest.mark.parametrize("strategy", ["batched", "batched_stop"])
@pytest.mark.parametrize("batch_size", [1, 2, 3, 8])
def test_batched_equals_sequential(eos_model, strategy, batch_size):
    prompts = varied_prompts()
    expected = run(eos_model, prompts, "sequential", 1).tokens
    assert run(eos_model, prompts, strategy, batch_size).tokens == expected


@pytest.mark.parametrize("strategy", ["batched_stop", "continuous"])
def test_packed_weights_generate_the_plain_tokens(eos_model, strategy):
    packed = copy.deepcopy(eos_model)
    assert packed.pack_for_inference(batch_size=4)
    prompts = varied_prompts()
    expected = run(eos_model, prompts, "sequential", 1).tokens
    assert run(packed, prompts, strategy, 4).tokens == expected


def test_length_sorted_order_keeps_outputs_in_input_order(eos_model):
    prompts = varied_prompts()
    expected = run(eos_model, prompts, "sequential", 1).tokens
    order = length_sorted([len(p) for p in prompts])
    assert run(eos_model, prompts, "batched_stop", 3, order=order).tokens == expected


def test_no_eos_runs_full_length(eos_model):
    result = run(eos_model, varied_prompts(4), "batched", 4, eos_token_id=None, max_new_tokens=10)
    assert [len(t) for t in result.tokens] == [10] * 4
    assert result.generated_tokens == 40


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_sampling_is_seeded_per_row(eos_model, strategy):
    prompts = varied_prompts()
    sampler = lambda: TopP(temperature=1.0, top_p=0.9, seed=11)  # noqa: E731
    one = run(eos_model, prompts, "sequential", 1, sampler=sampler()).tokens
    eight = run(eos_model, prompts, strategy, 8, sampler=sampler()).tokens
    assert one == eight
    other_seed = run(eos_model, prompts, strategy, 8, sampler=TopP(1.0, 0.9, seed=12)).tokens
    assert other_seed != one


def test_keys_name_the_random_stream(eos_model):
    prompt = varied_prompts(1)
    sampler = TopP(temperature=1.5, top_p=1.0, seed=0)
    same_prompt = [prompt[0]] * 4
    tokens = run(eos_model, same_prompt, "batched", 4, sampler=sampler,
                 keys=[(0, s) for s in range(4)]).tokens
    assert len({tuple(t) for t in tokens}) > 1, "different sample keys must give different samples"
    again = run(eos_model, [prompt[0]], "sequential", 1, sampler=TopP(1.5, 1.0, seed=0), keys=[(0, 2)])
    assert again.tokens[0] == tokens[2]


def test_padding_does_not_leak_into_real_tokens(eos_model):
    prompt = [5, 9, 14, 30]
    alone, _ = left_pad([prompt], PAD)
    padded, mask = left_pad([prompt, list(range(4, 40))], PAD)
    with torch.no_grad():
        ref = eos_model(alone)[0]
        got = eos_model(padded, mask)[0, -len(prompt):]
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "prompts, kwargs, message",
    [
        ([], {}, "no prompts"),
        ([[1, 2], []], {}, "prompt 1 is empty"),
        ([[1, 2]], {"max_new_tokens": 0}, "max_new_tokens"),
        ([[1] * 500], {"max_new_tokens": 20}, "context"),
        ([[1]], {"strategy": "warp"}, "unknown strategy"),
    ],
)
def test_bad_inputs(eos_model, prompts, kwargs, message):
    kwargs = {"strategy": "batched"} | kwargs
    strategy = kwargs.pop("strategy")
    with pytest.raises(ValueError, match=message):
        run(eos_model, prompts, strategy, 2, **kwargs)
