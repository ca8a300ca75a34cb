"""Self-consistency: batch-invariant sampling, voting on normalised answers, early stop."""

import pytest
import torch
from conftest import random_model

from batched_reasoning.world.arith import make_arith
from batched_reasoning.model.checkpoint import load_model, save_model
from batched_reasoning.data.answers import extract_answer, majority_vote, normalize_answer
from batched_reasoning.data.grading import is_correct
from batched_reasoning.core.io import read_jsonl, write_jsonl
from batched_reasoning.data.prompts import TextTokenizer
from batched_reasoning.engine.sampling import counter_uniform
from batched_reasoning.data.answers import is_decided
from batched_reasoning.stages.grade import accuracy_at_k, vote_problem, vote_samples
from batched_reasoning.stages.self_consistency import (SamplingSettings, make_sampler,
                                                       sample_answers, self_consistency)
from batched_reasoning.workflow.sampling_table import plot_self_consistency, self_consistency_table
from batched_reasoning.world.toy_tokenizer import train_toy_tokenizer

NUM_SAMPLES = 5
DATA = make_arith(seed=4, n_train=200, n_test=8)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A random model on a toy tokenizer, tilted towards digits so samples carry answers.

    Digit logits are doubled and all others but the end token shrunk: samples are short numbers
    that often, not always, agree, which gives early stop something to stop and to keep going.
    """
    tokenizer = train_toy_tokenizer([r["problem"] + r["solution"] for r in DATA["train"]], 300)
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    digits = [tokenizer.token_to_id(c) for c in "0123456789"]
    end = tokenizer.token_to_id("<|endoftext|>")
    model = random_model(vocab_size=vocab, max_position_embeddings=1024)
    with torch.no_grad():
        others = torch.ones(vocab, dtype=torch.bool)
        others[digits + [end]] = False
        model.lm_head.weight[others] *= 0.05
        model.lm_head.weight[digits] *= 2
    directory = tmp_path_factory.mktemp("sc") / "model"
    save_model(model, directory)
    tokenizer.save(str(directory / "tokenizer.json"))
    return directory


@pytest.fixture(scope="module")
def setup(model_dir):
    tokenizer = TextTokenizer.from_model_dir(model_dir)
    model = load_model(model_dir)
    prompts = [tokenizer.encode(r["problem"]) for r in DATA["test"]]
    return model, tokenizer, prompts


def sample(setup, strategy="batched", batch_size=8, early_stop=False, temperature=1.0):
    model, tokenizer, prompts = setup
    return sample_answers(
        model, tokenizer, prompts, num_samples=NUM_SAMPLES, strategy=strategy,
        batch_size=batch_size, max_new_tokens=2, sampler=make_sampler(temperature, 0.9, seed=3),
        early_stop=early_stop,
    )


@pytest.fixture(scope="module")
def reference(setup):
    return sample(setup, strategy="sequential", batch_size=1)


def answers(texts):
    return [extract_answer(t) for t in texts]


def test_votes_on_normalised_answers():
    vote = majority_vote(["\\frac{1}{2}", "3", "1/2", None, "0.5"])
    assert vote.winner == normalize_answer("1/2")
    assert vote.counts == {normalize_answer("1/2"): 3, normalize_answer("3"): 1}
    assert vote.answer == "\\frac{1}{2}"  # as the first sample that voted for it wrote it


def test_tie_goes_to_first_appearance_and_none_abstains():
    assert majority_vote(["5", "4", "4", "5"]).winner == "5"
    assert majority_vote(["4", "5", "5", "4"]).winner == "4"
    assert majority_vote([None, None, "2"]).winner == "2"
    assert majority_vote([None, None]) == majority_vote([])
    assert majority_vote([None]).winner is None and majority_vote([None]).counts == {}


def test_vote_is_graded_not_first_sample():
    record = {"problem": "1/4 + 1/4?", "answer": "0.5", "level": 2}
    texts = ["so \\boxed{3}", "\\boxed{\\frac{1}{2}}", "1/2", "\\boxed{3}", "it is 0.5"]
    graded = vote_problem(7, record, texts)
    assert graded["winner"] == normalize_answer("1/2") and graded["winner_answer"] == "\\frac{1}{2}"
    assert graded["votes"][normalize_answer("3")] == 2
    assert graded["correct"] and not graded["first_sample_correct"]
    assert graded["samples_used"] == 5 and graded["index"] == 7


def test_samples_vary_and_carry_answers(reference):
    """Guards the tests below: they need answers, disagreement and agreement."""
    votes = [majority_vote(answers(t)) for t in reference.texts]
    assert sum(v.winner is not None for v in votes) >= 4
    assert any(len(v.counts) > 1 for v in votes)
    assert any(max(v.counts.values(), default=0) > NUM_SAMPLES / 2 for v in votes)


@pytest.mark.parametrize("strategy,batch_size", [
    ("batched", 1), ("batched", 3), ("batched", 8), ("batched_stop", 3), ("batched_stop", 8),
])
def test_same_samples_whatever_batch_size_or_strategy(setup, reference, strategy, batch_size):
    samples = sample(setup, strategy=strategy, batch_size=batch_size)
    assert samples.texts == reference.texts
    assert samples.generated_tokens == reference.generated_tokens


def test_a_batch_holds_several_problems(setup):
    samples = sample(setup, batch_size=8)
    assert samples.batches == len(DATA["test"]) * NUM_SAMPLES // 8  # 40 pairs, full batches


def test_early_stop_keeps_winners_and_stops_at_strict_majority(setup, reference):
    full = [answers(t) for t in reference.texts]
    expected_used = [
        next((k for k in range(1, NUM_SAMPLES + 1) if is_decided(a[:k], NUM_SAMPLES)), NUM_SAMPLES)
        for a in full
    ]
    assert min(expected_used) < NUM_SAMPLES == max(expected_used), "test needs both kinds"
    for strategy, batch_size in [("sequential", 1), ("batched", 3), ("batched_stop", 8)]:
        stopped = sample(setup, strategy=strategy, batch_size=batch_size, early_stop=True)
        assert [len(t) for t in stopped.texts] == expected_used
        for texts, used, all_texts in zip(stopped.texts, expected_used, reference.texts):
            assert texts == all_texts[:used]  # the samples that ran are the same ones
            assert majority_vote(answers(texts)).winner == majority_vote(answers(all_texts)).winner
        assert sum(stopped.rounds) == sum(expected_used)


def test_greedy_at_temperature_zero(setup):
    samples = sample(setup, temperature=0)
    assert all(len(set(t)) == 1 for t in samples.texts)


def test_bad_values_raise(setup):
    with pytest.raises(ValueError, match="num_samples"):
        sample_answers(*setup, num_samples=0, strategy="batched", batch_size=2, max_new_tokens=2,
                       sampler=make_sampler(1.0, 0.9, 0), early_stop=False)
    with pytest.raises(ValueError, match="batch_size"):
        sample(setup, batch_size=0)
    with pytest.raises(ValueError, match="temperature"):
        make_sampler(-0.5, 0.9, 0)
    with pytest.raises(ValueError, match="top_p"):
        make_sampler(1.0, 0.0, 0)


def run_stage(model_dir, tmp_path, strategy, batch_size, early_stop=False, num_samples=3):
    data = tmp_path / "test.jsonl"
    write_jsonl(DATA["test"], data)
    out = tmp_path / strategy / f"bs{batch_size}"
    labels = {"model": "tiny", "dataset": "arith", "strategy": strategy,
              "batch_size": str(batch_size), "device": "cpu"}
    settings = SamplingSettings(
        strategy=strategy, batch_size=batch_size, device="cpu", dtype="float32", compile="off",
        num_samples=num_samples, temperature=1.0, top_p=0.9, max_new_tokens=3,
        prompt_style="base", prompt_suffix="\n\nExplain step by step.", seed=0,
        early_stop=early_stop, limit=4, threads=1)
    self_consistency(str(model_dir), str(data), str(out / "samples.jsonl"),
                     str(out / "sampling.json"), settings, {"seed": 0}, labels)
    metrics = vote_samples(str(data), str(out / "samples.jsonl"), str(out / "sampling.json"),
                           str(out / "records.jsonl"), str(out / "metrics.json"))
    return metrics, out / "records.jsonl"


def test_stage_table_and_plot(model_dir, tmp_path):
    with pytest.raises(ValueError, match="num_samples"):
        run_stage(model_dir, tmp_path, "batched", 2, num_samples=0)
    sequential, seq_records = run_stage(model_dir, tmp_path, "sequential", 1)
    batched, records_path = run_stage(model_dir, tmp_path, "batched_stop", 4)
    records = read_jsonl(records_path)
    assert len(records) == 4 and batched["n_problems"] == 4
    assert records == read_jsonl(seq_records)
    assert batched["batch_size"] == 4 and batched["samples_used"] == 12
    assert batched["samples_saved"] == 0 and batched["code_hash"]
    # two samples: a tie goes to the earlier one, unless it gave no answer
    two = [is_correct(r["samples"][0]["extracted"] if r["samples"][0]["extracted"] is not None
                      else r["samples"][1]["extracted"], r["gtruth_answer"]) for r in records]
    assert accuracy_at_k(records, 3) == pytest.approx(
        [batched["first_sample_accuracy"], sum(two) / len(two), batched["accuracy"]])
    assert 0 < batched["mean_agreement"] <= 1
    stopped, stopped_records = run_stage(model_dir, tmp_path / "stop", "batched", 4, early_stop=True)
    assert stopped["samples_used"] + stopped["samples_saved"] == 12
    assert [r["samples_used"] for r in read_jsonl(stopped_records)] == [
        len(r["samples"]) for r in read_jsonl(stopped_records)]
    assert [r["winner"] for r in read_jsonl(stopped_records)] == [r["winner"] for r in records]

    table = self_consistency_table(
        [str(seq_records.with_name("metrics.json")), str(records_path.with_name("metrics.json"))],
        [str(seq_records), str(records_path)])
    assert list(table.strategy) == ["batched_stop", "sequential"]
    assert (table.votes_match_sequential == "yes").all()
    assert table.speedup_vs_sequential.notna().all() and "best" not in table  # one timing each
    png = tmp_path / "sc.png"
    plot_self_consistency(table, [str(seq_records), str(records_path)], str(png))
    assert png.stat().st_size > 10_000


def splitmix64(x: int) -> int:
    """The reference SplitMix64 step in Python's unbounded integers, reduced modulo 2**64."""
    mask = (1 << 64) - 1
    x = (x + 0x9E3779B97F4A7C15) & mask
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask
    return x ^ (x >> 31)


def test_each_rows_uniforms_are_splitmix64_of_its_seed_and_draw_count():
    seeds = [0, 1, 2**62 + 12345, 987654321987]
    counters = [0, 5, 1, 1000]
    got = counter_uniform(torch.tensor(seeds), torch.tensor(counters)).tolist()
    for seed, counter, value in zip(seeds, counters, got):
        state = seed + counter * 0x9E3779B97F4A7C15  # the counter-th step from the seed
        assert value == (splitmix64(state) >> 11) / 2**53
    draws = counter_uniform(torch.full((20000,), 7), torch.arange(20000))
    assert 0 <= draws.min() and draws.max() < 1 and abs(draws.mean().item() - 0.5) < 0.01
