"""Repeated prompts (self-consistency's samples, GRPO's rollouts) prefill once, and their samples
stay exactly those of prompts generated one at a time (float32, same keys and random streams)."""

import random

import pytest
from conftest import EOS, PAD

from batched_reasoning.engine.generation import generate, share_prompts
from batched_reasoning.engine.padding import batches
from batched_reasoning.engine.sampling import TopP

PROBLEMS = [[5, 9, 11] * 13, [7], [12, 40, 3, 3, 8, 21, 60], list(range(4, 94))]
SAMPLES = 3
PAIRS = [(p, s) for p in range(len(PROBLEMS)) for s in range(SAMPLES)]
PROMPTS = [PROBLEMS[p] for p, _ in PAIRS]


def run(eos_model, strategy, batch_size, **kw):
    return generate(eos_model, PROMPTS, strategy=strategy, batch_size=batch_size,
                    max_new_tokens=16, eos_token_id=EOS, pad_token_id=PAD,
                    sampler=TopP(1.0, 0.95, seed=7), keys=PAIRS, **kw)


@pytest.fixture(scope="module")
def one_at_a_time(eos_model):
    result = run(eos_model, "sequential", 1)
    assert result.prefills == len(PROMPTS)
    answers = [{tuple(result.tokens[i]) for i, (p, _) in enumerate(PAIRS) if p == problem}
               for problem in range(len(PROBLEMS))]
    assert sum(len(a) > 1 for a in answers) >= 2, "test needs samples of a problem that differ"
    return result


def test_share_prompts_puts_one_row_per_prompt_first_and_points_repeats_at_it():
    prompts = [[1, 2, 3], [4], [1, 2, 3], [5, 6], [4], [1, 2, 3]]
    order, sources = share_prompts(prompts, range(6))
    assert order == [1, 3, 0, 4, 2, 5]  # distinct prompts shortest first, then the repeats
    assert sources == [0, 1, 2, 0, 2, 2]
    assert all(prompts[order[i]] == prompts[order[s]] for i, s in enumerate(sources))


@pytest.mark.parametrize("strategy", ["batched", "batched_stop", "continuous"])
@pytest.mark.parametrize("batch_size", [2, 4, 12])
def test_shared_prefill_samples_what_separate_prefills_sample(eos_model, one_at_a_time,
                                                             strategy, batch_size):
    result = run(eos_model, strategy, batch_size)
    assert result.tokens == one_at_a_time.tokens
    if strategy == "continuous":  # a prefix is copied from a slot that holds it; [7] has none
        distinct = len({tuple(p[:-1]) for p in PROMPTS if len(p) > 1})
        assert distinct <= result.prefills < len(PROMPTS) - SAMPLES
        expected = distinct if batch_size >= len(PROMPTS) else result.prefills
    else:
        expected = sum(len({tuple(PROMPTS[r]) for r in rows})
                       for rows in batches(range(len(PROMPTS)), batch_size))
    assert result.prefills == expected < len(PROMPTS)


def test_continuous_admits_free_slots_in_one_prefill_and_never_projects_it(eos_model):
    """8 prompts of similar lengths on 4 slots, every answer 12 tokens: two admissions, each one
    prefill call (`hidden_states` over a batch), and the vocabulary projection sees only the
    decode steps' rows."""
    rng = random.Random(1)
    prompts = [[rng.randrange(4, 97) for _ in range(20 + i)] for i in range(8)]
    kw = dict(max_new_tokens=12, eos_token_id=None, pad_token_id=PAD)
    expected = generate(eos_model, prompts, strategy="sequential", batch_size=1, **kw).tokens
    prefill_calls, projected_rows = [], []
    hidden_states = eos_model.hidden_states

    def counting_hidden_states(input_ids, *args, **kwargs):
        if input_ids.shape[1] > 1:
            prefill_calls.append(input_ids.shape[0])
        return hidden_states(input_ids, *args, **kwargs)

    eos_model.hidden_states = counting_hidden_states
    hook = eos_model.lm_head.register_forward_hook(
        lambda module, inputs, output: projected_rows.append(inputs[0].shape[:2].numel()))
    try:
        result = generate(eos_model, prompts, strategy="continuous", batch_size=4, **kw)
    finally:
        hook.remove()
        del eos_model.hidden_states
    assert result.tokens == expected
    assert prefill_calls == [4, 4]
    assert sum(projected_rows) == 8 * 12  # one row per decode step and prompt, each a new token
