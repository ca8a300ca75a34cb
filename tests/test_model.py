"""Our Qwen3 against Hugging Face transformers on the same weights."""

import json

import pytest
import torch
from conftest import random_model

from batched_reasoning.model.checkpoint import CheckpointError, load_model, save_model
from batched_reasoning.model import kernels
from batched_reasoning.model.kernels import Linear
from batched_reasoning.engine.memory_model import weights_mb
from batched_reasoning.engine.padding import left_pad

CONFIGS = [
    dict(tie_word_embeddings=True),
    dict(tie_word_embeddings=False, num_attention_heads=8, num_key_value_heads=2, head_dim=16,
         rope_theta=10_000.0),
]


@pytest.fixture
def transformers():
    """Only the tests that compare with Hugging Face need it installed."""
    return pytest.importorskip("transformers")


def assert_same_logits(got, expected):
    """Both models round in float32 somewhere (transformers computes its RMSNorms in float32
    whatever the dtype; in float32 the matrix products sum ~100 terms in orders that depend on
    the CPU's BLAS), each rounding ~6e-8 relative, a few dozen of them on a token's path: logits
    agree to ~1e-6 relative. 1e-5 leaves room on any CPU, while a wrong rotary table, norm or
    mask is off by far more (the padded test's own check: attended padding fails it)."""
    assert ((got - expected).abs().max() / expected.abs().max()).item() < 1e-5


@pytest.mark.parametrize("overrides", CONFIGS)
def test_logits_match_transformers_saved_by_hf(tmp_path, overrides, transformers):
    ours = random_model(seed=1, **overrides)
    hf_config = transformers.Qwen3Config(**ours.cfg.to_dict())
    hf = transformers.Qwen3ForCausalLM(hf_config).eval()
    hf.load_state_dict(ours.state_dict(), strict=False)
    hf.save_pretrained(tmp_path / "hf")
    loaded = load_model(tmp_path / "hf", dtype="float64")

    ids = torch.randint(0, ours.cfg.vocab_size, (1, 40))
    with torch.no_grad():
        assert_same_logits(loaded(ids), hf.double()(ids).logits)


@pytest.mark.parametrize("overrides", CONFIGS)
def test_left_padded_batch_matches_transformers(tmp_path, overrides, transformers):
    ours = random_model(seed=2, **overrides)
    save_model(ours, tmp_path / "ours")
    hf = transformers.Qwen3ForCausalLM.from_pretrained(
        tmp_path / "ours", dtype=torch.float32, attn_implementation="eager").eval()
    prompts = [[5, 6, 7], list(range(1, 30)), [9] * 11]
    ids, mask = left_pad(prompts, pad_token_id=0)
    position_ids = (mask.long().cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        expected = hf(ids, attention_mask=mask.long(), position_ids=position_ids).logits
        got = ours(ids, mask)
        unmasked = ours(ids, torch.ones_like(mask), position_ids=position_ids)
    assert_same_logits(got[mask], expected[mask])
    with pytest.raises(AssertionError):  # the tolerance tells attended padding
        assert_same_logits(unmasked[mask], expected[mask])


def test_saved_checkpoint_roundtrip(tmp_path):
    ours = random_model(seed=3, tie_word_embeddings=False)
    save_model(ours, tmp_path / "ckpt")
    again = load_model(tmp_path / "ckpt")
    ids = torch.randint(0, 97, (2, 9))
    with torch.no_grad():
        assert torch.equal(ours(ids), again(ids))


def test_bfloat16_load(tiny_checkpoint):
    model = load_model(tiny_checkpoint, dtype="bfloat16")
    assert model.dtype == torch.bfloat16
    with torch.no_grad():
        assert model(torch.tensor([[1, 2, 3]])).isfinite().all()


def test_sharded_checkpoint(tmp_path, tiny_checkpoint):
    from safetensors.torch import load_file, save_file

    tensors = load_file(tiny_checkpoint / "model.safetensors")
    names = sorted(tensors)
    shards = {"a.safetensors": names[: len(names) // 2], "b.safetensors": names[len(names) // 2:]}
    directory = tmp_path / "sharded"
    directory.mkdir()
    (directory / "config.json").write_text((tiny_checkpoint / "config.json").read_text())
    weight_map = {}
    for file, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, directory / file)
        weight_map |= {k: file for k in keys}
    (directory / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    ids = torch.tensor([[4, 5, 6]])
    with torch.no_grad():
        assert torch.equal(load_model(directory)(ids), load_model(tiny_checkpoint)(ids))


def test_bad_checkpoints_name_file_and_key(tmp_path, tiny_checkpoint):
    with pytest.raises(CheckpointError, match="not found"):
        load_model(tmp_path / "nowhere")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text((tiny_checkpoint / "config.json").read_text())
    with pytest.raises(CheckpointError, match="no weights found"):
        load_model(empty)
    config = json.loads((tiny_checkpoint / "config.json").read_text())
    config["hidden_size"] = 48
    (tiny_checkpoint / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"model.safetensors.*embed_tokens.*shape"):
        load_model(tiny_checkpoint)
    with pytest.raises(ValueError, match="unknown dtype"):
        load_model(tiny_checkpoint, dtype="float8")


def truncate(directory):
    weights = directory / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])


def overwrite_weights(directory):
    (directory / "model.safetensors").write_bytes(b"<html>rate limited</html>")


def drop_config_key(directory):
    config = json.loads((directory / "config.json").read_text())
    del config["num_hidden_layers"]
    (directory / "config.json").write_text(json.dumps(config))


def break_config_json(directory):
    (directory / "config.json").write_text('{"vocab_size": 64,')


def larger_tokenizer(directory):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    size = json.loads((directory / "config.json").read_text())["vocab_size"] + 5
    Tokenizer(WordLevel({f"t{i}": i for i in range(size)}, unk_token="t0")).save(
        str(directory / "tokenizer.json"))


# Issue 56: each damaged file is named, with what is wrong and what to do.
BAD_FILES = [
    (truncate, r"model\.safetensors: unreadable safetensors .*truncated or not safetensors: "
               r"download or build the model again"),
    (overwrite_weights, r"model\.safetensors: unreadable safetensors"),
    (drop_config_key, r"config\.json: missing required key 'num_hidden_layers'; a Qwen3"),
    (break_config_json, r"config\.json: not a JSON config .*download or build the model again"),
    (larger_tokenizer, r"tokenizer\.json: \d+ tokens, more than the \d+ rows \(vocab_size\) of "
                       r".*config\.json; the tokenizer belongs to another model"),
]


@pytest.mark.parametrize("damage, message", BAD_FILES, ids=[d.__name__ for d, _ in BAD_FILES])
def test_a_damaged_checkpoint_file_names_itself_and_what_to_do(tiny_checkpoint, damage, message):
    load_model(tiny_checkpoint)  # whole, it loads
    damage(tiny_checkpoint)
    with pytest.raises(ValueError, match=message):
        load_model(tiny_checkpoint)


@pytest.mark.parametrize("rows", [1, 3, 4, 8, 256, 257])
def test_linear_matches_torch_on_both_paths(rows):
    """Our Linear computes the same product (and gradients) whichever orientation it picks,
    and hands attention contiguous outputs (the fused CPU kernel needs unit last strides)."""
    torch.manual_seed(0)
    layer = Linear(64, 48, bias=True)
    x = torch.randn(rows, 1, 64, requires_grad=True)
    out = layer(x)
    expected = torch.nn.functional.linear(x, layer.weight, layer.bias)
    assert out.shape == (rows, 1, 48) and out.is_contiguous()
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    grads = torch.autograd.grad(out.sum(), (x, layer.weight))
    expected_grads = torch.autograd.grad(expected.sum(), (x, layer.weight))
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("overrides", CONFIGS)
def test_packing_for_inference_keeps_logits_and_size(tmp_path, overrides, packs_from_4_rows):
    """Weights packed into oneDNN's layout compute the same logits in the same memory, except a
    tied output layer's packed copy (the embedding lookup keeps the plain weight): no product's
    weight stays plain, for a compiled graph to pack again. The packed model refuses training
    and saving."""
    plain, model = random_model(seed=4, **overrides), random_model(seed=4, **overrides)
    size = weights_mb(model)
    assert not model.pack_for_inference(batch_size=3) and not model.packed
    assert model.pack_for_inference(batch_size=4) and model.packed
    tied = overrides["tie_word_embeddings"]
    copy_mb = model.lm_head.packed.numel() * model.lm_head.packed.element_size() / 2**20
    assert weights_mb(model) == size + (copy_mb if tied else 0)
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == tied
    assert all(m.packed is not None for m in model.modules() if isinstance(m, Linear))
    assert model.model.layers[0].mlp.down_proj.weight is None
    assert not hasattr(model.model.layers[0].self_attn, "q_proj")  # now in qkv_proj
    ids = torch.randint(0, model.cfg.vocab_size, (3, 17))
    with torch.no_grad():
        torch.testing.assert_close(model(ids), plain(ids), atol=1e-5, rtol=0)
    with pytest.raises(RuntimeError, match="packed for inference; reload"):
        model.train()
    with pytest.raises(ValueError, match="packed for inference"):
        save_model(model, tmp_path / "packed")
    assert not (tmp_path / "packed").exists()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_packs_where_the_cpu_can(dtype, packs_from_4_rows):
    """Packed and plain half precision are both roundings of the float32 result: packing may
    change which, but must stay as close to float32 as the plain product is (twice its error at
    most). A CPU that cannot pack the dtype (float16 without AVX512-FP16 or AVX-NE-CONVERT)
    keeps plain weights and computes the same logits, instead of crashing while packing."""
    reference = random_model(seed=5)
    plain, model = random_model(seed=5).to(dtype), random_model(seed=5).to(dtype)
    packed = model.pack_for_inference(batch_size=4)
    assert packed == kernels.can_pack(dtype) == model.packed
    ids = torch.randint(0, model.cfg.vocab_size, (3, 17))
    with torch.no_grad():
        exact = reference(ids)
        plain_error = (plain(ids).float() - exact).abs().max()
        packed_error = (model(ids).float() - exact).abs().max()
    assert 0 < plain_error < 0.1 * exact.abs().max()
    assert packed_error <= 2 * plain_error


def test_a_dtype_onednn_cannot_pack_runs_plain():
    """oneDNN has no float64 path: its packing ops exist but raise for it. Capability is tried,
    not assumed from the ops' presence, so a float64 model at a packing batch size stays plain."""
    assert kernels.can_pack(torch.float32)
    assert not kernels.can_pack(torch.float64)
    plain, model = random_model(seed=6).double(), random_model(seed=6).double()
    assert not model.pack_for_inference(batch_size=8) and not model.packed
    ids = torch.randint(0, model.cfg.vocab_size, (2, 9))
    with torch.no_grad():
        assert torch.equal(model(ids), plain(ids))
