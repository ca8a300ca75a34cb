"""The generation benchmark: CLI end to end on a tiny random checkpoint; the book's generation
on our weights reproducing ours token for token (which proves the weight mapping); and forced
answer lengths ending every row at its target in every implementation."""

import copy
import json
import platform
import random

import pandas as pd
import pytest
from conftest import EOS, PAD

from batched_reasoning.bench.cli import (
    SYNTHETIC_LENGTHS,
    ForcedLengths,
    benchmark,
    draw_answer_lengths,
    load_prompts,
    load_transformers,
    main,
    run_book,
    run_transformers,
)
from batched_reasoning.bench.memory import main as memory_main
from batched_reasoning.model.checkpoint import save_model
from batched_reasoning.model.config import Qwen3Config
from batched_reasoning.core.cpu_class import current_cpu_class
from batched_reasoning.engine.generation import STRATEGIES, generate
from batched_reasoning.core.io import write_jsonl
from batched_reasoning.data.prompts import TextTokenizer, format_prompt
from batched_reasoning.world.toy_tokenizer import train_toy_tokenizer

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


@pytest.mark.slow
def test_compiled_runs_report_their_graphs_and_compile_time(tiny_bench_checkpoint, tmp_path):
    """`--compile on`: our rows ran compiled, after an untimed run that compiled every shape,
    and give the same tokens as the sequential run."""
    d = tiny_bench_checkpoint
    main(["--checkpoint", str(d / "tiny"), "--prompts", str(d / "problems.jsonl"), "--n-prompts", "4",
          "--strategies", "sequential,batched_stop", "--batch-sizes", "2",
          "--max-new-tokens", "6", "--no-eos", "--threads", "1", "--compile", "on",
          "--csv", str(tmp_path / "out.csv")])
    table = pd.read_csv(tmp_path / "out.csv")
    assert set(table.decode_mode) == {"compiled"}
    assert (table.graphs >= 1).all() and (table.compile_s > 0).all()
    assert (table.same_as_sequential == 1.0).all()


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
    cfg = Qwen3Config.from_file(d / "tiny" / "config.json")  # (this test process may have
    layer_shape = (cfg.hidden_size, cfg.num_attention_heads * cfg.head_dim,  # timed others)
                   cfg.num_key_value_heads * cfg.head_dim, cfg.intermediate_size)
    pack_from = provenance["kernel_choices"][  # as timed on this CPU
        f"pack_from_rows/float32/{'x'.join(map(str, layer_shape))}"]
    assert (table.packed_weights == (pack_from is not None and table.batch_size >= pack_from)).all()
    assert provenance["packages"]["torch"] and len(provenance["rows"]) == len(table)
    assert provenance["code_hash"]
    assert len(set(provenance["prompt_lengths"])) > 1
    steps = pd.read_csv(tmp_path / "out-decode.csv")
    assert steps.batch_size.tolist() == [1, 2, 4]
    assert (steps.step_ms > 0).all() and (steps.bound_ms > 0).all() and (steps.pct_of_bound > 0).all()
    assert provenance["machine"]["read_gb_s"] > 0 and len(provenance["decode_steps"]) == 3


@pytest.mark.slow
@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                    reason="the CPU classes cap x86 instruction sets")
def test_cli_runs_as_the_cpu_class_asked_for_and_records_it(tiny_bench_checkpoint, tmp_path):
    d = tiny_bench_checkpoint
    args = ["--checkpoint", str(d / "tiny"), "--prompts", str(d / "problems.jsonl"),
            "--n-prompts", "2", "--strategies", "batched", "--batch-sizes", "2",
            "--max-new-tokens", "3", "--threads", "1", "--csv", str(tmp_path / "out.csv"),
            "--json", str(tmp_path / "out.json")]
    table = main([*args, "--cpu-class", "avx2"])
    assert table.cpu_class.tolist() == ["avx2"] and table.cpu_capability.tolist() == ["AVX2"]
    provenance = json.loads((tmp_path / "out.json").read_text())
    assert (provenance["cpu_class"], provenance["cpu_capability"]) == ("avx2", "AVX2")
    assert main(args).cpu_class.tolist() == [current_cpu_class()]


@pytest.mark.slow
def test_cli_forced_answer_lengths_against_book_and_transformers(tiny_bench_checkpoint, tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("reasoning_from_scratch.qwen3_batched")
    d = tiny_bench_checkpoint
    main(["--checkpoint", str(d / "tiny"), "--prompts", str(d / "problems.jsonl"), "--n-prompts", "5",
          "--batch-sizes", "1,2,4", "--answer-lengths", "3,9", "--book", "--transformers",
          "--threads", "1", "--csv", str(tmp_path / "out.csv"), "--json", str(tmp_path / "out.json")])
    table = pd.read_csv(tmp_path / "out.csv")
    answer_lengths = json.loads((tmp_path / "out.json").read_text())["answer_lengths"]
    assert len(set(answer_lengths)) > 1 and all(3 <= n <= 9 for n in answer_lengths)
    assert sorted(table[table.implementation == "transformers"].batch_size) == [1, 2, 4]
    assert sorted(table[table.implementation == "ours"].strategy.unique()) == sorted(STRATEGIES)
    assert set(table.implementation) == {"ours", "book", "transformers"}
    assert (table.generated_tokens == sum(answer_lengths)).all(), "every implementation, same work"
    assert (table.same_as_sequential == 1.0).all()
    ours = table[table.implementation == "ours"]
    assert ours.ours_vs_transformers.notna().all()


def test_samples_of_one_problem_share_its_prefill(tiny_bench_checkpoint, tmp_path):
    d = tiny_bench_checkpoint
    main(["--checkpoint", str(d / "tiny"), "--prompts", str(d / "problems.jsonl"), "--n-prompts", "3",
          "--samples", "4", "--strategies", "sequential,batched_stop,continuous",
          "--batch-sizes", "4", "--answer-lengths", "2,7", "--threads", "1",
          "--csv", str(tmp_path / "out.csv")])
    table = pd.read_csv(tmp_path / "out.csv").set_index("strategy")
    assert (table.n_prompts == 12).all() and (table.same_as_sequential == 1.0).all()
    assert table.prefills.to_dict() == {"sequential": 12, "batched_stop": 3, "continuous": 3}


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
    from batched_reasoning.bench.book_compat import to_book_model

    prompts = varied_prompts()
    ours = generate(eos_model, prompts, strategy="sequential", batch_size=1, max_new_tokens=16,
                    eos_token_id=eos_token_id, pad_token_id=PAD).tokens
    if eos_token_id is not None:
        assert len({len(t) for t in ours}) >= 3, "test needs rows that end at different steps"
    assert len({tok for t in ours for tok in t}) >= 5, "test needs varied outputs"
    book = run_book(to_book_model(eos_model), prompts, strategy, 3, 16, eos_token_id, PAD,
                    eos_model.device).tokens
    assert book == ours


def test_benchmark_compares_with_the_book(eos_model, packs_from_4_rows):
    pytest.importorskip("reasoning_from_scratch.qwen3_batched")
    model = copy.deepcopy(eos_model)  # the benchmark packs it for inference
    table = benchmark(model, varied_prompts(), strategies=["sequential", "batched_stop"],
                      batch_sizes=[4], max_new_tokens=5, eos_token_id=None, pad_token_id=PAD,
                      book=True)
    ours = table[(table.implementation == "ours") & (table.strategy == "batched_stop")].iloc[0]
    book = table[(table.implementation == "book") & (table.strategy == "batched_stop")].iloc[0]
    assert ours.ours_vs_book == pytest.approx(ours.tokens_per_s / book.tokens_per_s)
    assert set(table.implementation) == {"ours", "book"}
    assert (table.same_as_sequential == 1.0).all()
    assert not book.packed_weights and ours.packed_weights


def test_answer_lengths_are_seeded_and_in_range():
    lengths = draw_answer_lengths(50, 16, 256, seed=3)
    assert lengths == draw_answer_lengths(50, 16, 256, seed=3)
    assert all(16 <= n <= 256 for n in lengths) and len(set(lengths)) > 10


def test_forced_lengths_end_every_implementation_exactly_there(eos_model, tmp_path):
    """The end-boosted model would stop rows early; forcing overrides it both ways."""
    pytest.importorskip("transformers")
    pytest.importorskip("reasoning_from_scratch.qwen3_batched")
    from batched_reasoning.bench.book_compat import to_book_model

    prompts = varied_prompts()
    lengths = [5, 1, 12, 3, 8, 2, 9]
    natural = generate(eos_model, prompts, strategy="sequential", batch_size=1, max_new_tokens=13,
                       eos_token_id=EOS, pad_token_id=PAD).tokens
    assert any(len(t) < n for t, n in zip(natural, lengths)), "test needs rows that end early"
    assert any(len(t) > n for t, n in zip(natural, lengths)), "test needs rows that run on"
    args = dict(max_new_tokens=13, eos_token_id=EOS, pad_token_id=PAD)
    sequential = generate(eos_model, prompts, strategy="sequential", batch_size=1,
                          sampler=ForcedLengths(lengths, EOS), **args).tokens
    assert [len(t) for t in sequential] == lengths
    for strategy in STRATEGIES:
        ours = generate(eos_model, prompts, strategy=strategy, batch_size=3,
                        sampler=ForcedLengths(lengths, EOS), **args).tokens
        assert ours == sequential, strategy
    book_model = to_book_model(eos_model)
    for strategy in ["batched", "batched_stop"]:
        book = run_book(book_model, prompts, strategy, 3, **args, device=eos_model.device,
                        answer_lengths=lengths).tokens
        assert book == sequential, strategy
    save_model(eos_model, tmp_path / "model")
    hf = load_transformers(tmp_path / "model", "float32", eos_model.device)
    assert run_transformers(hf, prompts, 3, **args, answer_lengths=lengths).tokens == sequential


def test_transformers_without_end_token_runs_full_length(eos_model, tmp_path):
    pytest.importorskip("transformers")
    save_model(eos_model, tmp_path / "model")
    hf = load_transformers(tmp_path / "model", "float32", eos_model.device)
    prompts = varied_prompts()
    ours = generate(eos_model, prompts, strategy="sequential", batch_size=1, max_new_tokens=6,
                    eos_token_id=None, pad_token_id=PAD).tokens
    theirs = run_transformers(hf, prompts, 4, max_new_tokens=6, eos_token_id=None, pad_token_id=PAD)
    assert theirs.tokens == ours and all(len(t) == 6 for t in ours)


def test_memory_benchmark_predicts_each_fresh_process(tiny_bench_checkpoint, tmp_path):
    d = tiny_bench_checkpoint
    memory_main(["--checkpoint", str(d / "tiny"), "--prompts", str(d / "problems.jsonl"),
                 "--batch-sizes", "1,3", "--max-new-tokens", "4", "--threads", "1",
                 "--csv", str(tmp_path / "memory.csv"), "--json", str(tmp_path / "memory.json")])
    table = pd.read_csv(tmp_path / "memory.csv")
    tokenizer = TextTokenizer.from_model_dir(d / "tiny", "base")
    lengths = [len(tokenizer.encode(format_prompt(p, "base"))) for p in PROBLEMS]
    assert table.batch_size.tolist() == [1, 3]
    assert table.prompt_len.tolist() == [lengths[0], max(lengths[:3])]
    assert (table.baseline_mb > 100).all(), "a fresh process holding torch has a real baseline"
    # Each run is predicted for its own shape (the model's accuracy where the growing parts
    # dominate is tests/test_memory_model.py's): the cache holds every row's prompt and answer,
    # so 3 rows padded to the longest prompt hold 3 x (longest + 4) positions against 1 x (first + 4).
    one, three = table.iloc[0], table.iloc[1]
    assert three.predicted_kv_cache_mb / one.predicted_kv_cache_mb == pytest.approx(
        3 * (max(lengths[:3]) + 4) / (lengths[0] + 4))
    for row in table.itertuples():
        assert row.measured_mb >= row.baseline_mb  # a peak taken in the run's own process
        assert row.predicted_mb > row.baseline_mb
        assert (row.error > 0) == (row.predicted_mb > row.measured_mb)
    assert json.loads((tmp_path / "memory.json").read_text())["code_hash"]


def test_a_checkpoint_can_be_stored_in_bfloat16_and_loads_in_any_dtype(tmp_path):
    """The GPU check stores its 0.6B random checkpoint in bfloat16 (half the bytes)."""
    from safetensors import safe_open

    from batched_reasoning.bench.cli import make_checkpoint
    from batched_reasoning.model.checkpoint import load_model

    tokenizer = train_toy_tokenizer(["one two three four five six seven"] * 20, 300)
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    sizes = {}
    for dtype in ("float32", "bfloat16"):
        make_checkpoint("tiny", tmp_path / "tokenizer.json", tmp_path / dtype, dtype=dtype)
        with safe_open(str(tmp_path / dtype / "model.safetensors"), "pt") as f:
            assert {str(f.get_tensor(k).dtype) for k in f.keys()} == {f"torch.{dtype}"}
        assert json.loads((tmp_path / dtype / "config.json").read_text())["torch_dtype"] == dtype
        sizes[dtype] = (tmp_path / dtype / "model.safetensors").stat().st_size
    assert sizes["bfloat16"] < 0.6 * sizes["float32"]
    model = load_model(tmp_path / "bfloat16", dtype="float32")
    assert {str(p.dtype) for p in model.parameters()} == {"torch.float32"}
