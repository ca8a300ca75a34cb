"""The `toy` model's tokenizer and config: Qwen3-shaped, deterministic, loadable by transformers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from batched_reasoning.model.config import Qwen3Config, new_model_config
from batched_reasoning.world.toy_tokenizer import (
    QWEN3_ADDED_TOKENS,
    QWEN3_SPECIAL_TOKENS,
    train_toy_tokenizer,
)

QWEN3_TOKENIZER = Path(__file__).resolve().parents[2] / "shared/data/qwen3-tokenizer.json"

TEXTS = [
    "What is $3 + 4$? The answer is \\boxed{7}.",
    "Let $x = 12$. Then $2x = 24$, so the answer is \\boxed{24}.\n\nDone.",
    "Compute 1234 * 5678.\nWe multiply digit by digit: 1234 * 5678 = 7006652.",
    "  Indented line\twith a tab, and   several   spaces.\r\nWindows newline; it's we're they'll.",
    "Ünïcödé: naïve café, π ≈ 3.14159, √2, 日本語のテキスト. <think>hmm</think>",
] * 5
SAMPLE = "Hello world! It's 2024: 12+345=357.\n\n  \\boxed{12}\tdone  \r\nnaïve π≈3.14 日本語 <|endoftext|>"


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return train_toy_tokenizer(TEXTS, vocab_size=400)


def bpe_size(tokenizer: Tokenizer) -> int:
    return len(json.loads(tokenizer.to_str())["model"]["vocab"])


def real_qwen3() -> Tokenizer:
    if not QWEN3_TOKENIZER.is_file():
        pytest.skip(f"{QWEN3_TOKENIZER} not available")
    return Tokenizer.from_file(str(QWEN3_TOKENIZER))


@pytest.mark.parametrize("text", [
    "\\boxed{12}",
    "line one\nline two\n\n\nline  three\r\n",
    SAMPLE,
    "unseen bytes: \x00\x7f 🙂 ∮ — ok",
    "  leading and trailing spaces  ",
    "",
])
def test_round_trip(tokenizer, text):
    ids = tokenizer.encode(text).ids
    assert tokenizer.decode(ids, skip_special_tokens=False) == text


def test_digits_one_per_token(tokenizer):
    encoding = tokenizer.encode("x = 1234567890 and 42")
    digit_tokens = [t for t in encoding.tokens if any(c.isdigit() for c in t)]
    assert digit_tokens == list("1234567890") + ["4", "2"]


def test_added_tokens_follow_bpe_vocab_in_qwen3_order(tokenizer):
    n = bpe_size(tokenizer)
    assert 256 < n <= 400
    assert tokenizer.get_vocab_size(with_added_tokens=True) == n + 26
    for offset, content in enumerate(QWEN3_SPECIAL_TOKENS):
        assert tokenizer.token_to_id(content) == n + offset
    added = json.loads(tokenizer.to_str())["added_tokens"]
    assert [(t["content"], t["special"]) for t in added] == QWEN3_ADDED_TOKENS
    assert tokenizer.encode("a<|endoftext|>b").ids.count(n) == 1
    assert tokenizer.encode("<|endoftext|>").ids == [n]
    assert tokenizer.encode("<think>\n").ids[0] == tokenizer.token_to_id("<think>")
    # Like Qwen3: skipping special tokens drops <|endoftext|> but keeps the (non-special) think tags.
    ids = tokenizer.encode("<think>x</think><|endoftext|>").ids
    assert tokenizer.decode(ids, skip_special_tokens=True) == "<think>x</think>"


def test_deterministic(tmp_path):
    first = train_toy_tokenizer(TEXTS, vocab_size=350).to_str()
    assert train_toy_tokenizer(TEXTS, vocab_size=350).to_str() == first
    assert train_toy_tokenizer(iter(TEXTS), vocab_size=350).to_str() == first  # any iterable
    # Another process (fresh hash seeds) with several threads gives the same bytes too.
    (tmp_path / "texts.json").write_text(json.dumps(TEXTS))
    code = (
        "import json, sys; from batched_reasoning.world.toy_tokenizer import train_toy_tokenizer; "
        "sys.stdout.write(train_toy_tokenizer(json.load(open(sys.argv[1])), vocab_size=350).to_str())"
    )
    env = os.environ | {"RAYON_NUM_THREADS": "4", "PYTHONHASHSEED": "123"}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "texts.json")],
                         env=env, capture_output=True, text=True, check=True, timeout=60).stdout
    assert out == first


def test_rejects_vocab_smaller_than_byte_alphabet():
    with pytest.raises(ValueError, match="256"):
        train_toy_tokenizer(TEXTS, vocab_size=100)


def test_added_tokens_match_real_qwen3():
    real = json.loads(QWEN3_TOKENIZER.read_text()) if QWEN3_TOKENIZER.is_file() else pytest.skip("no qwen3 tokenizer")
    added = sorted(real["added_tokens"], key=lambda t: t["id"])
    assert [t["id"] for t in added] == list(range(151643, 151669))
    assert [(t["content"], t["special"]) for t in added] == QWEN3_ADDED_TOKENS


def test_pipeline_matches_real_qwen3(tokenizer):
    real = real_qwen3()
    for sample in [SAMPLE, *TEXTS[:5]]:
        assert tokenizer.pre_tokenizer.pre_tokenize_str(sample) == real.pre_tokenizer.pre_tokenize_str(sample)
    ours = json.loads(tokenizer.to_str())
    theirs = json.loads(QWEN3_TOKENIZER.read_text())
    for section in ["normalizer", "pre_tokenizer", "decoder", "post_processor"]:
        assert ours[section] == theirs[section], section
    model_options = {k: v for k, v in theirs["model"].items() if k not in ("vocab", "merges")}
    assert {k: v for k, v in ours["model"].items() if k not in ("vocab", "merges")} == model_options


def test_a_new_models_config_loads_in_transformers(tmp_path, tokenizer):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    end = tokenizer.token_to_id("<|endoftext|>")
    shape = Qwen3Config(vocab_size=vocab, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                        intermediate_size=64, max_position_embeddings=256)
    config = new_model_config(shape, end_token_id=end)
    (tmp_path / "config.json").write_text(json.dumps(config, indent=2))
    loaded = transformers.Qwen3Config.from_pretrained(tmp_path)
    assert (loaded.vocab_size, loaded.num_hidden_layers, loaded.num_key_value_heads, loaded.head_dim) == (vocab, 2, 2, 8)
    assert loaded.eos_token_id == loaded.pad_token_id == end and loaded.bos_token_id is None
    assert loaded.tie_word_embeddings is True and loaded.rms_norm_eps == 1e-6
    assert loaded.rope_parameters["rope_theta"] == 1e6

    # Weights named as Qwen3ForCausalLM names them (tied lm_head not stored, as HF saves it).
    torch.manual_seed(0)
    reference = transformers.Qwen3ForCausalLM(loaded)
    state = {k: v.contiguous() for k, v in reference.state_dict().items() if k != "lm_head.weight"}
    save_file(state, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    model, info = transformers.Qwen3ForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert model.dtype == torch.float32
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    ids = torch.tensor([tokenizer.encode("1+1=").ids])
    assert model(ids).logits.shape == (1, ids.shape[1], vocab)


def test_toy_tokenizer_job_writes_what_tokenization_and_the_model_read(tmp_path):
    """The toy's tokenizer is a folder of its own (tokenization reads nothing else), and the toy
    model built around it has its vocabulary and its end token."""
    from batched_reasoning.core.io import write_jsonl
    from batched_reasoning.data.prompts import TextTokenizer
    from batched_reasoning.model.checkpoint import load_model
    from batched_reasoning.world.arith import make_arith
    from batched_reasoning.world.toy import build_toy_model
    from batched_reasoning.world.toy_tokenizer import END_TOKEN, build_toy_tokenizer

    write_jsonl(make_arith(0, 64, 4)["train"], tmp_path / "train.jsonl")
    build_toy_tokenizer(tmp_path / "train.jsonl", tmp_path / "tokenizer", vocab_size=300)
    assert sorted(p.name for p in (tmp_path / "tokenizer").iterdir()) == [
        "generation_config.json", "tokenizer.json"]
    tokenizer = TextTokenizer.from_model_dir(tmp_path / "tokenizer")
    assert tokenizer.end_token_ids == (tokenizer.tokenizer.token_to_id(END_TOKEN),)
    shape = dict(vocab_size=1, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                 num_key_value_heads=1, head_dim=8, intermediate_size=32,
                 max_position_embeddings=64, rope_theta=10000.0)
    build_toy_model(tmp_path / "tokenizer", tmp_path / "init", architecture=shape, seed=0)
    model = load_model(tmp_path / "init")
    assert model.cfg.vocab_size == tokenizer.tokenizer.get_vocab_size(with_added_tokens=True)
    assert TextTokenizer.from_model_dir(tmp_path / "init").end_token_ids == tokenizer.end_token_ids
