"""Batched generation must reproduce sequential generation token for token (float32)."""

import copy
import math
import random

import pytest
import torch
from conftest import EOS, PAD, needs_cuda, random_model

from batched_reasoning.engine import generation
from batched_reasoning.model import qwen3 as model_module
from batched_reasoning.engine.generation import STRATEGIES, Greedy, generate, prefill_batch
from batched_reasoning.engine.kv_cache import KVCache
from batched_reasoning.engine.scheduling import row_groups
from batched_reasoning.engine.padding import left_pad, length_sorted, pad_fraction
from batched_reasoning.engine.sampling import TopP
from batched_reasoning.engine.agreement import compare_answer


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
def test_packed_weights_generate_the_plain_tokens(eos_model, strategy, packs_from_4_rows):
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


SECOND_EOS = 5


class EndsAt:
    """Greedy, but row r picks end token `ends[r][0]` exactly at its step `ends[r][1]`."""

    def __init__(self, ends: dict[int, tuple[int, int]]):
        self.ends = ends

    def start(self, keys, device):
        self.steps = [0] * len(keys)

    def __call__(self, logits, rows):
        logits = logits.clone()
        logits[:, [EOS, SECOND_EOS]] = -torch.inf  # never by chance
        for j, r in enumerate(rows):
            token, step = self.ends.get(r, (None, None))
            if step == self.steps[r]:
                logits[j, token] = torch.inf
            self.steps[r] += 1
        return logits.argmax(-1)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_either_declared_end_token_ends_a_row_in_every_strategy(eos_model, strategy):
    prompts = varied_prompts(6)
    ends = {0: (EOS, 3), 1: (SECOND_EOS, 5), 2: (SECOND_EOS, 0), 4: (EOS, 9)}
    result = run(eos_model, prompts, strategy, 3, eos_token_id=(EOS, SECOND_EOS),
                 sampler=EndsAt(ends), max_new_tokens=12)
    assert [len(t) for t in result.tokens] == [3, 5, 0, 12, 9, 12]
    assert result.stop_tokens == [EOS, SECOND_EOS, SECOND_EOS, None, EOS, None]
    assert not any(t in (EOS, SECOND_EOS) for answer in result.tokens for t in answer)


def test_greedy_records_each_picks_margin_over_the_runner_up(eos_model):
    prompts = varied_prompts(3)
    result = run(eos_model, prompts, "batched_stop", 3)
    for prompt, answer, stop, margins in zip(prompts, result.tokens, result.stop_tokens,
                                              result.margins):
        assert len(margins) == len(answer) + (stop is not None)
        with torch.no_grad():
            logits = eos_model(torch.tensor([prompt + answer]))[0, len(prompt) - 1:]
        top = logits.topk(2, dim=-1).values
        expected = (top[:, 0] - top[:, 1])[:len(margins)]
        torch.testing.assert_close(torch.tensor(margins), expected, atol=1e-4, rtol=1e-4)


def test_a_difference_at_an_exact_tie_is_a_near_tie_and_a_broken_mask_a_mismatch(
        eos_model, monkeypatch):
    model = copy.deepcopy(eos_model)
    tied, other = 40, 41
    with torch.no_grad():  # two tokens with the same output row tie wherever they lead
        model.lm_head.weight[tied] *= 3  # and lead often
        model.lm_head.weight[other] = model.lm_head.weight[tied]
    prompts = varied_prompts()
    sequential = run(model, prompts, "sequential", 1)
    row, step = next((r, answer.index(tied)) for r, answer in enumerate(sequential.tokens)
                     if tied in answer)
    assert sequential.margins[row][step] == 0.0  # an exact tie, broken by argmax's first index
    flipped = sequential.tokens[row][:step] + [other]  # what rounding could have picked instead
    args = (sequential.tokens[row], sequential.margins[row], "float32")
    assert compare_answer(flipped, *args) == "near-tie"
    assert compare_answer(sequential.tokens[row], *args) == "same"

    def no_padding_mask(key_mask, query_pos):  # the bug: padded keys are attended
        return real_mask(torch.ones_like(key_mask), query_pos)

    real_mask = model_module.attention_mask_4d
    monkeypatch.setattr(model_module, "attention_mask_4d", no_padding_mask)
    broken = run(eos_model, prompts, "batched", 8)
    expected = run(eos_model, prompts, "sequential", 1)  # one row: nothing padded to attend
    verdicts = [compare_answer(b, s, m, "float32")
                for b, s, m in zip(broken.tokens, expected.tokens, expected.margins)]
    assert "MISMATCH" in verdicts and "near-tie" not in verdicts


@needs_cuda("needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_attention_never_takes_the_math_kernel(eos_model, dtype):
    """Only the flash and memory-efficient kernels are allowed: were grouped heads and a mask
    to need the math kernel (which copies keys and values per query head), SDPA would raise."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    model = copy.deepcopy(eos_model).to("cuda", dtype)
    prompts = varied_prompts()
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
        for strategy in STRATEGIES:  # padded and unpadded prefill, masked and unmasked decode
            run(model, prompts, strategy, 3)
        input_ids, attention_mask = left_pad(prompts[:4], PAD, "cuda")
        model(input_ids, attention_mask).float().sum().backward()  # a training pass


def test_prompts_of_very_different_lengths_prefill_apart_into_one_padded_cache(monkeypatch):
    """`prefill_batch` splits a batch by length, but attention must see what one left-padded
    prefill leaves: the same logits, masks and real keys (float64: only sums' order differs),
    and masked positions that cannot poison attention (the cache starts out full of NaN)."""
    model = random_model(seed=3).to(torch.float64)
    rng = random.Random(0)
    prompts = [[rng.randrange(4, 97) for _ in range(n)] for n in (2, 3, 40, 41)]
    lengths = [len(p) for p in prompts]
    monkeypatch.setattr(generation, "prefill_call_cost", lambda model: 31)  # whatever was timed
    assert row_groups(lengths, 31) == [(0, 2), (2, 4)]  # two calls

    def nan_cache():
        shape = (model.cfg.num_hidden_layers, 4, model.cfg.num_key_value_heads, 45, model.cfg.head_dim)
        return KVCache(torch.full(shape, math.nan, dtype=torch.float64),
                       torch.full(shape, math.nan, dtype=torch.float64))

    split, whole = nan_cache(), nan_cache()
    logits = prefill_batch(model, split, prompts, PAD)
    input_ids, attention_mask = left_pad(prompts, PAD, model.device)
    expected = model(input_ids, attention_mask, cache=whole, last_only=True)[:, -1]
    torch.testing.assert_close(logits, expected, rtol=1e-12, atol=1e-12)
    assert torch.equal(split.key_mask, whole.key_mask)
    assert (split.length, split.padded) == (whole.length, whole.padded) == (41, True)
    real = whole.key_mask[:, :41]
    for cache_keys, whole_keys in ((split.keys, whole.keys), (split.values, whole.values)):
        by_row = [k[:, :, :, :41].permute(1, 3, 0, 2, 4)[real] for k in (cache_keys, whole_keys)]
        torch.testing.assert_close(*by_row, rtol=1e-12, atol=1e-12)
    assert not split.keys[:, :, :, :41].isnan().any()  # the short rows' padding was zeroed
    step = torch.tensor([[5], [6], [7], [8]])
    after = model(step, torch.ones_like(step, dtype=torch.bool), cache=split)[:, -1]
    assert after.isfinite().all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_greedy_picks_the_first_of_tied_maxima_as_argmax_does(dtype):
    logits = torch.zeros(3, 151_936, dtype=dtype)  # Qwen3's vocabulary: vectorised reductions
    logits[0, [7, 9000, 151_935]] = 2.0
    logits[1, 100_000] = 1.0
    picked = generation.pick(Greedy(), logits, [0, 1, 2])
    assert picked == [(7, 0.0, None), (100_000, 1.0, None), (0, 0.0, None)]
    assert [token for token, *_ in picked] == logits.argmax(-1).tolist()


def test_pad_fraction_counts_the_padding_of_every_batch_at_its_own_width():
    assert pad_fraction([[3, 1]]) == pytest.approx(2 / 6)
    assert pad_fraction([[2, 2], [4]]) == 0.0  # each batch padded to its own longest
    assert pad_fraction([[4, 1], [2, 2]]) == pytest.approx(3 / 12)


@pytest.mark.parametrize("strategy", ["batched", "batched_stop", "continuous"])
def test_completion_counts_the_wait_for_earlier_batches(eos_model, strategy):
    """Every prompt is submitted at the call's start: a request served after others waits for
    them, so its completion time exceeds its service latency, which starts at its admission;
    its first token comes after that wait and before it is done."""
    result = run(eos_model, varied_prompts(), strategy, 2)
    waited = [c - s for c, s in zip(result.completion, result.latency)]
    # one served later waited for a slot, which only a whole earlier service frees: on the same
    # clock, whatever the machine's speed or stalls
    assert min(waited) >= 0 and max(waited) >= min(result.latency) > 0
    assert all(0 < first <= done for first, done
               in zip(result.time_to_first_token, result.completion))
    assert result.steps == [len(t) + (s is not None)
                            for t, s in zip(result.tokens, result.stop_tokens)]
    assert len(result.time_per_output_token) == sum(n > 1 for n in result.steps)
    assert result.decode_steps >= max(result.steps) - 1
