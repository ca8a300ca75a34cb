"""The tokenizer of the offline default model `toy`, shaped like Qwen3's.

`toy` lets the whole workflow run without the Hugging Face Hub. To exercise the same code paths
as a real Qwen3 checkpoint, its tokenizer copies Qwen3's normalizer, pre-tokenizer (GPT-4-style
regex with one digit per token, then byte-level), decoder and post-processor, and its 26 added
tokens with their ids in Qwen3's order and their `special` flags; only the BPE merges are learnt
from the given texts, with a small vocabulary.
"""

from __future__ import annotations

import json
from pathlib import Path
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

from ..core.io import atomic_dir, read_jsonl
from ..data.prompts import BASE_END_TOKEN, render_prompt

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


def training_text(record: dict) -> str:
    """A problem as the model will see it (the book's prompt) followed by its worked solution."""
    return f"{render_prompt(record['problem'])} {record['solution']}"


def build_toy_tokenizer(train_path: str, out_dir: str, *, vocab_size: int) -> None:
    """The toy's tokenizer as a checkpoint ships it: tokenizer.json and generation_config.json
    (the token that ends answers). Its own job, so that prompts are tokenized again only when
    the tokenizer changes, never when the model's code or weights do."""
    tokenizer = train_toy_tokenizer((training_text(r) for r in read_jsonl(train_path)), vocab_size)
    with atomic_dir(out_dir) as staging:
        tokenizer.save(str(Path(staging) / "tokenizer.json"))
        end = {"eos_token_id": tokenizer.token_to_id(END_TOKEN)}
        (Path(staging) / "generation_config.json").write_text(json.dumps(end, indent=2) + "\n")
