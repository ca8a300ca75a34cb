"""llama.cpp as the benchmark's peer, for real: a tiny random checkpoint converted by llama.cpp's
own converter, its `llama-batched-bench` run by our benchmark, and its figures beside ours.

Needs a llama.cpp built by `python -m batched_reasoning.bench.llama_cpp build DIR`, named by the
LLAMA_CPP environment variable (CI builds one), and the shared Qwen3 tokenizer: llama.cpp's
converter accepts only tokenizers it knows.
"""

import os
import re
import sys

import pandas as pd
import pytest
from conftest import shared_file

from batched_reasoning.bench.cli import main as bench_main
from batched_reasoning.model.config import Qwen3Config
from batched_reasoning.core.io import read_json
from batched_reasoning.bench.llama_cpp import batched_bench, binary_path, convert

LLAMA_CPP = os.environ.get("LLAMA_CPP")
pytestmark = pytest.mark.skipif(
    not LLAMA_CPP, reason="set LLAMA_CPP to a folder built by "
                          "`python -m batched_reasoning.bench.llama_cpp build DIR`")


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("llama")
    checkpoint = tmp / "tiny"
    bench_main(["--make-checkpoint", str(checkpoint), "--shape", "tiny",
                "--tokenizer", str(shared_file("qwen3-tokenizer.json"))])
    return checkpoint, convert(checkpoint, tmp / "tiny.gguf", LLAMA_CPP, "f32")


def test_gguf_holds_our_checkpoint_shape(converted):
    """What llama.cpp times is our model's shape: layers, widths, heads, vocabulary."""
    checkpoint, gguf = converted
    sys.path.insert(0, os.path.join(LLAMA_CPP, "gguf-py"))
    from gguf import GGUFReader

    cfg = Qwen3Config.from_file(checkpoint / "config.json")
    reader = GGUFReader(gguf)
    field = {name: reader.fields[name].contents() for name in reader.fields}
    assert field["general.architecture"] == "qwen3"
    assert field["qwen3.block_count"] == cfg.num_hidden_layers
    assert field["qwen3.embedding_length"] == cfg.hidden_size
    assert field["qwen3.feed_forward_length"] == cfg.intermediate_size
    assert field["qwen3.attention.head_count"] == cfg.num_attention_heads
    assert field["qwen3.attention.head_count_kv"] == cfg.num_key_value_heads
    assert field["qwen3.attention.key_length"] == cfg.head_dim
    shapes = {t.name: list(t.shape) for t in reader.tensors}
    assert shapes["token_embd.weight"] == [cfg.hidden_size, cfg.vocab_size]
    assert shapes["blk.0.attn_q.weight"] == [cfg.hidden_size, cfg.num_attention_heads * cfg.head_dim]


def test_bench_runs_llama_cpp_beside_ours(converted, tmp_path):
    checkpoint, gguf = converted
    csv, record = tmp_path / "bench.csv", tmp_path / "bench.json"
    bench_main(["--checkpoint", str(checkpoint), "--n-prompts", "4", "--batch-sizes", "1,2",
                "--strategies", "batched_stop,continuous", "--answer-lengths", "3,9",
                "--threads", "1", "--llama-batched-bench", str(binary_path(LLAMA_CPP)),
                "--gguf", str(gguf), "--csv", str(csv), "--json", str(record)])
    ours, steps = pd.read_csv(csv), pd.read_csv(tmp_path / "bench-decode.csv")
    peer = pd.read_csv(tmp_path / "bench-llama.csv")
    run = read_json(record)
    prompt_lengths, answer_lengths = run["prompt_lengths"], run["answer_lengths"]

    assert peer.batch_size.tolist() == [1, 2]
    # llama.cpp ran our mean prompt and mean answer, with the benchmark's threads
    assert (peer.prompt_tokens == round(sum(prompt_lengths) / len(prompt_lengths))).all()
    assert (peer.new_tokens == round(sum(answer_lengths) / len(answer_lengths))).all()
    assert (peer.threads == 1).all()
    assert (peer.generated_tokens == peer.batch_size * peer.new_tokens).all()
    assert (peer[["prefill_s", "decode_s", "decode_tokens_per_s", "tokens_per_s"]] > 0).all().all()
    assert (peer.wall_s >= peer.decode_s).all()
    # beside it: our decode step and our best strategy at the same batch size
    for row in peer.itertuples():
        step = steps[steps.batch_size == row.batch_size].iloc[0]
        assert row.ours_decode_tokens_per_s == pytest.approx(step.decode_tokens_per_s)
        same_batch = ours[(ours.implementation == "ours") & (ours.batch_size == row.batch_size)]
        assert row.ours_best_tokens_per_s == pytest.approx(same_batch.tokens_per_s.max())
        assert row.ours_vs_llama == pytest.approx(row.ours_best_tokens_per_s / row.tokens_per_s)
    assert re.match(r"\d+\.\d+\.\d+", run["llama_cpp"]["version"])  # what the binary says
    assert len(run["llama_cpp"]["rows"]) == 2


def test_unreadable_gguf_names_the_file(tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_text("not a model")
    with pytest.raises(RuntimeError, match="broken.gguf"):
        batched_bench(binary_path(LLAMA_CPP), broken, 8, 2, [1], threads=1)
