"""Model configuration, read from (and written as) a Hugging Face Qwen3 `config.json`."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import torch

# float64 is for verification (equivalence tests compare in it); runs use the other three.
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
          "float64": torch.float64}


def resolve_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; choose one of {sorted(DTYPES)}") from None


@dataclass(frozen=True)
class Qwen3Config:
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = True
    max_position_embeddings: int = 40_960
    attention_bias: bool = False

    def __post_init__(self):
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )

    @classmethod
    def from_dict(cls, values: dict, source: str = "config") -> "Qwen3Config":
        """Take the keys we need from an HF config dict; a missing key is named with its file."""
        rope = values.get("rope_parameters") or values.get("rope_scaling") or {}
        if rope.get("rope_type", "default") != "default":
            raise ValueError(f"{source}: rope type {rope['rope_type']!r} is not supported")
        if "rope_theta" in rope:  # transformers 5 nests it here
            values = {"rope_theta": rope["rope_theta"]} | values
        fields = {f.name: f for f in dataclasses.fields(cls)}
        kwargs = {}
        for name, field in fields.items():
            if name in values and values[name] is not None:
                kwargs[name] = values[name]
            elif name == "head_dim" and "hidden_size" in values:
                kwargs[name] = values["hidden_size"] // values["num_attention_heads"]
            elif field.default is dataclasses.MISSING:
                raise ValueError(f"{source}: missing required key {name!r}; a Qwen3 "
                                 "config.json has it (download or build the model again)")
        return cls(**kwargs)

    @classmethod
    def from_file(cls, path: str | Path) -> "Qwen3Config":
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"model config not found: {path}")
        try:
            values = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ValueError(f"{path}: not a JSON config ({error}); the checkpoint's config.json "
                             "is damaged: download or build the model again") from error
        return cls.from_dict(values, source=str(path))

    def to_dict(self) -> dict:
        """The HF keys, so `transformers.Qwen3ForCausalLM` can load what we save."""
        return {
            "architectures": ["Qwen3ForCausalLM"],
            "model_type": "qwen3",
            "hidden_act": "silu",
            **dataclasses.asdict(self),
        }


def new_model_config(cfg: Qwen3Config, end_token_id: int) -> dict:
    """The whole `config.json` of a model made here rather than downloaded (the toy), keyed as
    the real Qwen3 configs are (rope_theta at top level, as transformers 4.x writes it;
    transformers 5 converts it when loading), so both our loader and
    `transformers.Qwen3ForCausalLM.from_pretrained` read it. `end_token_id` both ends answers
    and pads, as in Qwen3 base models."""
    return cfg.to_dict() | {
        "initializer_range": 0.02, "rope_scaling": None, "attention_dropout": 0.0,
        "use_cache": True, "use_sliding_window": False, "sliding_window": None,
        "max_window_layers": cfg.num_hidden_layers, "bos_token_id": None,
        "eos_token_id": end_token_id, "pad_token_id": end_token_id,
        "torch_dtype": "float32", "dtype": "float32",
    }


# Architectures of published Qwen3 checkpoints (from their config.json), so a hub model's
# catalogue entry can declare its shape and the workflow plans its jobs before downloading it.
QWEN3_SHAPES = {
    "qwen3-0.6b": Qwen3Config(
        vocab_size=151_936, hidden_size=1024, num_hidden_layers=28, num_attention_heads=16,
        num_key_value_heads=8, head_dim=128, intermediate_size=3072,
        max_position_embeddings=40_960, tie_word_embeddings=True,
    ),
}
