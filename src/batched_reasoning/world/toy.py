"""The offline default model `toy`: a small Qwen3 with a BPE tokenizer trained on the data.

Written in exactly the layout of a real checkpoint (config.json, tokenizer.json,
model.safetensors), so every stage treats it like Qwen3-0.6B.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch
from torch import nn

from ..model.checkpoint import save_model
from ..model.config import Qwen3Config, new_model_config
from ..core.io import read_jsonl
from ..model.qwen3 import Qwen3
from ..data.prompts import render_prompt
from .toy_tokenizer import END_TOKEN, train_toy_tokenizer


def training_text(record: dict) -> str:
    """A problem as the model will see it (the book's prompt) followed by its worked solution."""
    return f"{render_prompt(record['problem'])} {record['solution']}"


def init_weights(model: Qwen3, seed: int, std: float = 0.02) -> Qwen3:
    """Seeded initialisation as Hugging Face initialises Qwen3 (normal, std 0.02; norms at 1)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                module.weight.normal_(0.0, std, generator=generator)
                if getattr(module, "bias", None) is not None:
                    module.bias.zero_()
    return model


def build_toy_model(train_path: str, out_dir: str, *, architecture: dict, seed: int) -> None:
    records = read_jsonl(train_path)
    tokenizer = train_toy_tokenizer((training_text(r) for r in records), architecture["vocab_size"])
    shape = Qwen3Config(**(architecture | {
        "vocab_size": tokenizer.get_vocab_size(with_added_tokens=True)}))
    config = new_model_config(shape, end_token_id=tokenizer.token_to_id(END_TOKEN))
    torch.manual_seed(seed)
    model = init_weights(Qwen3(shape), seed)
    with tempfile.TemporaryDirectory() as source:
        tokenizer.save(str(Path(source) / "tokenizer.json"))
        (Path(source) / "config.json").write_text(json.dumps(config, indent=2))
        save_model(model, out_dir, source=source)
