"""The offline default model `toy`: a small Qwen3 with a BPE tokenizer trained on the data.

Written in exactly the layout of a real checkpoint (config.json, tokenizer.json,
model.safetensors), so every stage treats it like Qwen3-0.6B.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import torch
from torch import nn

from ..model.checkpoint import save_model
from ..model.config import Qwen3Config, new_model_config
from ..model.qwen3 import Qwen3
from ..data.prompts import TextTokenizer


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


def build_toy_model(tokenizer_dir: str, out_dir: str, *, architecture: dict, seed: int) -> None:
    """A freshly initialised toy checkpoint around the toy's tokenizer (`build_toy_tokenizer`):
    the vocabulary is the tokenizer's, the token that ends answers also pads."""
    tokenizer = TextTokenizer.from_model_dir(tokenizer_dir)
    vocab_size = tokenizer.tokenizer.get_vocab_size(with_added_tokens=True)
    shape = Qwen3Config(**(architecture | {"vocab_size": vocab_size}))
    config = new_model_config(shape, end_token_id=tokenizer.eos_token_id)
    torch.manual_seed(seed)
    model = init_weights(Qwen3(shape), seed)
    with tempfile.TemporaryDirectory() as source:
        (Path(source) / "config.json").write_text(json.dumps(config, indent=2))
        for name in ("tokenizer.json", "generation_config.json"):
            shutil.copy2(Path(tokenizer_dir) / name, Path(source) / name)
        save_model(model, out_dir, source=source)
