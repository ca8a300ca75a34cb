"""Continuous batching must reproduce sequential generation token for token (float32)."""

import random
from itertools import pairwise

import pytest
import torch
from conftest import EOS, PAD

from batched_reasoning.model import attention

from batched_reasoning.engine.generation import Greedy, generate
from batched_reasoning.engine.kv_cache import KVCache, SlotCache
from batched_reasoning.engine.compiled import Eager
from batched_reasoning.engine.decode import DecodeState
from batched_reasoning.engine.scheduling import row_groups
from batched_reasoning.engine.padding import length_sorted, right_pad
from batched_reasoning.engine.sampling import TopP

LENGTHS = [1, 120, 5, 64, 2, 33, 90, 12, 7, 50]  # more prompts than slots, very different lengths


def prompts_of(lengths, seed=0):
    rng = random.Random(seed)
    return [[rng.randrange(4, 97) for _ in range(length)] for length in lengths]


def run(eos_model, prompts, strategy, batch_size, **kw):
    kw = {"max_new_tokens": 24, "eos_token_id": EOS, "pad_token_id": PAD} | kw
    return generate(eos_model, prompts, strategy=strategy, batch_size=batch_size, **kw)


@pytest.fixture(scope="module")
def sequential(eos_model):
    return run(eos_model, prompts_of(LENGTHS), "sequential", 1)


def test_answers_have_very_different_lengths(sequential):
    lengths = [len(t) for t in sequential.tokens]
    assert min(lengths) <= 3 and max(lengths) == 24, lengths


@pytest.mark.parametrize("slots", [1, 2, 3, 4, 16])
def test_continuous_equals_sequential(eos_model, sequential, slots):
    result = run(eos_model, prompts_of(LENGTHS), "continuous", slots)
    assert result.tokens == sequential.tokens


def test_order_sets_admission_and_outputs_stay_in_input_order(eos_model, sequential):
    prompts = prompts_of(LENGTHS)
    order = length_sorted(LENGTHS)
    result = run(eos_model, prompts, "continuous", 3, order=order)
    assert result.tokens == sequential.tokens
    assert result.batch_rows == [order]


class RecordingGreedy(Greedy):
    """Greedy decoding that notes which prompts each step sampled for."""

    def start(self, keys, device):
        self.steps = []

    def __call__(self, logits, rows):
        self.steps.append(list(rows))
        return super().__call__(logits, rows)


@pytest.mark.parametrize("slots", [1, 3])
def test_prompts_are_admitted_in_order(eos_model, slots):
    order = [7, 3, 0, 9, 4, 1, 2, 8, 6, 5]
    sampler = RecordingGreedy()
    run(eos_model, prompts_of(LENGTHS), "continuous", slots, order=order, sampler=sampler)
    admitted = []
    for rows in sampler.steps:
        admitted += [index for index in rows if index not in admitted]
    assert admitted == order
    assert sampler.steps[0] == order[:slots]


def test_sampled_outputs_equal_sequential(eos_model):
    prompts = prompts_of(LENGTHS)
    sampler = lambda seed=11: TopP(temperature=1.0, top_p=0.9, seed=seed)
    expected = run(eos_model, prompts, "sequential", 1, sampler=sampler()).tokens
    assert run(eos_model, prompts, "continuous", 3, sampler=sampler()).tokens == expected
    assert run(eos_model, prompts, "continuous", 3, sampler=sampler(12)).tokens != expected


def test_no_eos_runs_full_length(eos_model):
    result = run(eos_model, prompts_of(LENGTHS[:5]), "continuous", 2, eos_token_id=None,
                 max_new_tokens=6)
    assert [len(t) for t in result.tokens] == [6] * 5


def test_timing_fields(eos_model):
    result = run(eos_model, prompts_of(LENGTHS), "continuous", 4)
    assert result.prefill_seconds > 0 and result.decode_seconds > 0
    assert all(t > 0 for t in result.latency)
    # A prompt's latency starts with its own prefill, so none exceeds the whole call.
    assert max(result.latency) <= result.prefill_seconds + result.decode_seconds + 1e-3


def test_slot_cache_rows_of_different_lengths_match_alone(eos_model):
    """Two slots prefilled together (right-padded, in the other order than their rows) then
    decoding one token together at different lengths give what each prompt gives alone."""
    prompts = prompts_of([9, 30], seed=3)
    cache = SlotCache.for_model(eos_model, 2, 40)
    cache.keys.fill_(1e4)  # what slots held before (finite, as in use) must not leak in
    cache.values.fill_(1e4)
    alone = []
    with torch.inference_mode():
        for prompt in prompts:
            single = KVCache.for_model(eos_model, 1, 40)
            eos_model(torch.tensor([prompt[:-1]]), cache=single)
            alone.append(eos_model(torch.tensor([[prompt[-1]]]), cache=single)[0, -1])
        input_ids, attention_mask = right_pad([p[:-1] for p in prompts[::-1]], PAD)
        eos_model.hidden_states(input_ids, attention_mask, cache=cache.prefill([1, 0]))
        state = DecodeState.empty_slots(eos_model, cache, Eager())
        for row, prompt in enumerate(prompts):
            state.refill(row, len(prompt) - 1)
        with eos_model.decoding(40):
            together = state.step([p[-1] for p in prompts])
    torch.testing.assert_close(together, torch.stack(alone), atol=1e-5, rtol=0)
    assert state.lengths == [9, 30]


def run_cost(ends, runs, call_cost):
    return sum(call_cost + (stop - first) * max(ends[first:stop]) for first, stop in runs)


def all_splits(n):
    """Every way to cut rows 0 .. n-1 into runs of neighbours."""
    for cuts in range(2 ** (n - 1)):
        bounds = [0] + [i + 1 for i in range(n - 1) if cuts >> i & 1] + [n]
        yield list(pairwise(bounds))


@pytest.mark.parametrize("seed", range(20))
def test_row_groups_is_the_cheapest_split(seed):
    rng = random.Random(seed)
    ends = [rng.randint(1, 300) for _ in range(rng.randint(1, 8))]
    call_cost = rng.choice([0, 8, 32, 200])
    runs = row_groups(ends, call_cost)
    assert [r for run in runs for r in range(*run)] == list(range(len(ends)))
    cheapest = min(run_cost(ends, split, call_cost) for split in all_splits(len(ends)))
    assert run_cost(ends, runs, call_cost) == cheapest


def test_row_groups_keeps_equal_rows_together_and_splits_off_a_long_one():
    assert row_groups([50] * 6, 32) == [(0, 6)]
    assert row_groups([50, 50, 400, 50], 32) == [(0, 2), (2, 3), (3, 4)]
    assert row_groups([50, 60, 70], 10**9) == [(0, 3)]


@pytest.mark.parametrize("time, masked", [(1, False), (1, True), (7, True)])
def test_folded_grouped_attention_is_grouped_attention(time, masked):
    """The GPU path (query heads of a group folded into the query length) computes what
    `enable_gqa` does; float64, so only the order of sums differs."""
    torch.manual_seed(0)
    q = torch.randn(3, time, 8, 16, dtype=torch.float64).transpose(1, 2)  # as the model has it
    k, v = (torch.randn(3, 2, 11, 16, dtype=torch.float64) for _ in range(2))
    mask = None
    if masked:
        mask = torch.rand(3, 1, time, 11) > 0.3
        mask[..., 0] = True  # every query sees some key
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                                enable_gqa=True)
    torch.testing.assert_close(attention.folded_attention(q, k, v, mask), expected,
                               atol=1e-12, rtol=1e-12)
