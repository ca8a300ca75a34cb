"""The generation benchmark: CLI end to end on a tiny random checkpoint, and the book's
generation on our weights reproducing ours token for token (which proves the weight mapping)."""

import json
import random

import pandas as pd
import pytest
from conftest import EOS, PAD

from batched_reasoning.bench import (
    SYNTHETIC_LENGTHS,
    benchmark,
    load_prompts,
    main,
    run_book,
)
from batched_reasoning.generation import generate
from batched_reasoning.io import write_jsonl
from batched_reasoning.toy_tokenizer import train_toy_tokenizer

PROBLEMS = [
    "What is 2+3?",
    "Ann has 12 apples and gets 30 more, then gives away 7. How many apples does Ann have now?",
    "Find the remainder when 2^10 is divided by 7.",
    "A rectangle has sides 3 and 4. What is the length of its diagonal? Give the answer as an integer.",
    "Simplify 6/8.",
]


@pytest.fixture(scope="module")
def tiny_bench_checkpoint(tmp_path_factory):
    directory = tmp_path_factory.mktemp("bench")
    tokenizer = train_toy_tokenizer(PROBLEMS * 4, vocab_size=300)
    tokenizer.save(str(directory / "tokenizer.json"))
    main(["--make-checkpoint", str(directory / "tiny"), "--shape", "tiny",
          "--tokenizer", str(directory / "tokenizer.json")])
    write_jsonl([{"problem": p, "answer": "1"} for p in PROBLEMS], directory / "problems.jsonl")
    return directory


def test_cli_writes_a_row_per_strategy_and_batch_size(tiny_bench_checkpoint, tmp_path):
    d = tiny_bench_checkpoint
    main(["--checkpoint", str(d / "tiny"), "--prompts", str(d / "problems.jsonl"), "--n-prompts", "4",
          "--strategies", "sequential,batched,batched_stop", "--batch-sizes", "1,2,4",
          "--max-new-tokens", "6", "--no-eos", "--threads", "1",
          "--csv", str(tmp_path / "out.csv"), "--json", str(tmp_path / "out.json")])
    table = pd.read_csv(tmp_path / "out.csv")
    runs = sorted(zip(table.strategy, table.batch_size))
    assert runs == [("batched", 1), ("batched", 2), ("batched", 4), ("batched_stop", 1),
                    ("batched_stop", 2), ("batched_stop", 4), ("sequential", 1)]
    assert (table.tokens_per_s > 0).all() and (table.peak_mem_mb > 0).all()
    assert table.set_index("strategy").loc["sequential", "speedup_vs_sequential"] == 1.0
    assert (table.generated_tokens == 4 * 6).all(), "--no-eos: every row runs max-new-tokens"
    assert (table.same_as_sequential == 1.0).all()
    provenance = json.loads((tmp_path / "out.json").read_text())
    assert provenance["packages"]["torch"] and len(provenance["rows"]) == len(table)
    assert len(set(provenance["prompt_lengths"])) > 1


def test_synthetic_prompts_are_seeded_and_varied():
    one = load_prompts(None, 6, tokenizer=None, style="base", vocab_size=97, seed=1)
    assert one == load_prompts(None, 6, tokenizer=None, style="base", vocab_size=97, seed=1)
    lengths = [len(p) for p in one]
    assert len(set(lengths)) > 1
    assert all(SYNTHETIC_LENGTHS[0] <= n <= SYNTHETIC_LENGTHS[1] for n in lengths)


def varied_prompts():
    rng = random.Random(0)
    return [[rng.randrange(4, 97) for _ in range(n)] for n in (1, 40, 5, 17, 64, 2, 9)]


@pytest.mark.parametrize("eos_token_id", [EOS, None])
@pytest.mark.parametrize("strategy", ["batched", "batched_stop"])
def test_book_generation_on_our_weights_equals_ours(eos_model, strategy, eos_token_id):
    pytest.importorskip("reasoning_from_scratch.qwen3_batched")
    from batched_reasoning.book_compat import to_book_model

    prompts = varied_prompts()
    ours = generate(eos_model, prompts, strategy="sequential", batch_size=1, max_new_tokens=16,
                    eos_token_id=eos_token_id, pad_token_id=PAD).tokens
    if eos_token_id is not None:
        assert len({len(t) for t in ours}) >= 3, "test needs rows that end at different steps"
    assert len({tok for t in ours for tok in t}) >= 5, "test needs varied outputs"
    book = run_book(to_book_model(eos_model), prompts, strategy, 3, 16, eos_token_id, PAD,
                    eos_model.device).tokens
    assert book == ours


def test_benchmark_compares_with_the_book(eos_model):
    pytest.importorskip("reasoning_from_scratch.qwen3_batched")
    table = benchmark(eos_model, varied_prompts(), strategies=["sequential", "batched_stop"],
                      batch_sizes=[4], max_new_tokens=5, eos_token_id=None, pad_token_id=PAD,
                      book=True)
    ours = table[(table.implementation == "ours") & (table.strategy == "batched_stop")].iloc[0]
    book = table[(table.implementation == "book") & (table.strategy == "batched_stop")].iloc[0]
    assert ours.ours_vs_book == pytest.approx(ours.tokens_per_s / book.tokens_per_s)
    assert set(table.implementation) == {"ours", "book"}
    assert (table.same_as_sequential == 1.0).all()
