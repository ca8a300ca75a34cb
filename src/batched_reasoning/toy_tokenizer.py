"""The tokenizer and config of the offline default model `toy`, shaped like Qwen3's.

`toy` lets the whole workflow run without the Hugging Face Hub. To exercise the same code paths
as a real Qwen3 checkpoint, its tokenizer copies Qwen3's normalizer, pre-tokenizer (GPT-4-style
regex with one digit per token, then byte-level), decoder and post-processor, and its 26 added
tokens with their ids in Qwen3's order and their `special` flags; only the BPE merges are learnt
from the given texts, with a small vocabulary.
"""

from __future__ import annotations

from typing import Iterable

from tokenizers import (
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

from .prompts import BASE_END_TOKEN

# Qwen3's added tokens in id order (151643..151668 in the real model), with their `special` flag
# copied from Qwen3's tokenizer.json: tool-call and think tags are added tokens but NOT special,
# so `decode(..., skip_special_tokens=True)` keeps them, as with the real model.
QWEN3_ADDED_TOKENS: list[tuple[str, bool]] = [
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", True),
    ("<|fim_middle|>", True),
    ("<|fim_suffix|>", True),
    ("<|fim_pad|>", True),
    ("<|repo_name|>", True),
    ("<|file_sep|>", True),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
]
QWEN3_SPECIAL_TOKENS: list[str] = [content for content, _ in QWEN3_ADDED_TOKENS]
END_TOKEN = BASE_END_TOKEN  # the toy is a base model: it ends its answers as Qwen3 base models do

# Qwen3's pre-tokenizer split pattern, verbatim from its tokenizer.json. `\p{N}` alone (not `\p{N}+`)
# puts every digit in its own token.
QWEN3_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _qwen3_pipeline(tokenizer: Tokenizer) -> None:
    """Install Qwen3's normalizer, pre-tokenizer, decoder and post-processor (as in its tokenizer.json)."""
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN3_SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    tokenizer.post_processor = processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True)


def train_toy_tokenizer(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """Train a byte-level BPE on `texts` and append Qwen3's 26 added tokens after it.

    `vocab_size` bounds the BPE vocabulary (256 byte symbols + merges); the added tokens come on
    top, with ids `bpe_size .. bpe_size + 25` in Qwen3's order, so the full vocabulary is
    `tokenizer.get_vocab_size(with_added_tokens=True)`. Every byte is in the alphabet, so any text
    round-trips. The result is deterministic: same texts and size give the same tokenizer.json.
    """
    if vocab_size < 256:
        raise ValueError(f"vocab_size must be at least 256 (the byte alphabet), got {vocab_size}")
    tokenizer = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    _qwen3_pipeline(tokenizer)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    # Deterministic as is: ties between equally frequent pairs are broken by token ids, and
    # parallel training only reorders integer sums (checked: identical JSON for 1..16 threads).
    tokenizer.train_from_iterator(texts, trainer=trainer)
    for content, special in QWEN3_ADDED_TOKENS:  # one at a time: ids follow this order
        token = AddedToken(content, single_word=False, lstrip=False, rstrip=False, normalized=False, special=special)
        if special:
            tokenizer.add_special_tokens([token])
        else:
            tokenizer.add_tokens([token])
    return tokenizer


def toy_model_config(
    vocab_size: int,
    hidden_size: int,
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    intermediate_size: int,
    max_position_embeddings: int,
    end_token_id: int,
    rope_theta: float = 1_000_000.0,
) -> dict:
    """A Hugging Face Qwen3 `config.json` dict for a small model.

    Keys follow the real Qwen3 configs (rope_theta at top level, as transformers 4.x writes it;
    transformers 5 converts it to `rope_parameters` when loading), so both our loader and
    `transformers.Qwen3ForCausalLM.from_pretrained` read it. `vocab_size` must cover the added
    tokens; `end_token_id` (the id of `<|endoftext|>`) is both EOS and PAD, as in Qwen3 base models.
    """
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})")
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": vocab_size,
        "hidden_size": hidden_size,
        "intermediate_size": intermediate_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": max_position_embeddings,
        "initializer_range": 0.02,
        "rms_norm_eps": 1e-6,
        "rope_theta": rope_theta,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "use_cache": True,
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": num_layers,
        "tie_word_embeddings": True,
        "bos_token_id": None,
        "eos_token_id": end_token_id,
        "pad_token_id": end_token_id,
        "torch_dtype": "float32",
        "dtype": "float32",
    }
