"""Load and save models as Hugging Face directories (config.json + safetensors).

Our module names equal Hugging Face's, so loading is a key-and-shape check and a copy; saving
writes the same layout, which `transformers.Qwen3ForCausalLM.from_pretrained` reads back.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from tokenizers import Tokenizer
from safetensors.torch import save_file

from ..core.io import atomic_dir, atomic_path
from .config import Qwen3Config, resolve_dtype
from .qwen3 import Qwen3

WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
# Files that describe the tokenizer and generation settings travel with the weights.
COMPANION_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")


class CheckpointError(ValueError):
    pass


def weight_files(directory: Path) -> list[Path]:
    """The safetensors files of a checkpoint directory, single-file or sharded."""
    if (directory / WEIGHTS).is_file():
        return [directory / WEIGHTS]
    index = directory / WEIGHTS_INDEX
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        missing = [s for s in shards if not (directory / s).is_file()]
        if missing:
            raise CheckpointError(f"{index}: shard file(s) missing: {', '.join(missing)}")
        return [directory / s for s in shards]
    raise CheckpointError(
        f"{directory}: no weights found (expected {WEIGHTS} or {WEIGHTS_INDEX})"
    )


def readable_keys(file: Path) -> list[str]:
    """The tensor names of a safetensors file, or an error naming it: a truncated download's
    header promises more bytes than the file holds."""
    try:
        with safe_open(file, framework="pt", device="cpu") as f:
            return list(f.keys())
    except (SafetensorError, OSError) as error:
        raise CheckpointError(f"{file}: unreadable safetensors ({error}); the file is truncated "
                              "or not safetensors: download or build the model again") from error


def check_vocabulary(directory: Path, cfg: Qwen3Config) -> None:
    """Refuse a tokenizer whose token ids reach past the model's embedding rows: the first such
    id would index outside them, deep inside a forward pass."""
    path = directory / "tokenizer.json"
    if not path.is_file():
        return
    size = Tokenizer.from_file(str(path)).get_vocab_size(with_added_tokens=True)
    if size > cfg.vocab_size:
        raise CheckpointError(
            f"{path}: {size} tokens, more than the {cfg.vocab_size} rows (vocab_size) of "
            f"{directory / 'config.json'}; the tokenizer belongs to another model: put the "
            "model's own tokenizer.json beside its weights")


def load_model(directory: str | Path, dtype: str = "float32", device: str = "cpu") -> Qwen3:
    """Build a Qwen3 from `directory`'s config.json and load its safetensors weights.

    The weights are copied out of the memory-mapped file even when no conversion is needed:
    a mapped page joins the process's RSS only once touched, so with mapped weights the RSS
    after loading would not count them (the memory model's baseline is that RSS minus the
    weights) and would grow during the first forward pass instead. The file is mapped anew for
    each tensor: pages touched stay in the RSS while the file is mapped, so one mapping for all
    of them peaked at twice the weights (4.8 GB for Qwen3-0.6B in float32), enough to fail a
    job sized for the model; now the peak is the weights plus one tensor.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"checkpoint directory not found: {directory}")
    cfg = Qwen3Config.from_file(directory / "config.json")
    check_vocabulary(directory, cfg)
    torch_dtype = resolve_dtype(dtype)
    files = weight_files(directory)
    with torch.device("meta"):
        model = Qwen3(cfg)
    expected = model.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        keys = readable_keys(file)
        for key in keys:
            if key not in expected:
                raise CheckpointError(f"{file}: unexpected parameter {key!r}")
            with safe_open(file, framework="pt", device="cpu") as f:
                tensor = f.get_tensor(key).to(torch_dtype, copy=True)
            if tensor.shape != expected[key].shape:
                raise CheckpointError(
                    f"{file}: parameter {key!r} has shape {tuple(tensor.shape)}, "
                    f"config.json implies {tuple(expected[key].shape)}"
                )
            tensors[key] = tensor
    if cfg.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)
        tensors["lm_head.weight"] = tensors.get("model.embed_tokens.weight")
    missing = [k for k in expected if tensors.get(k) is None]
    if missing:
        raise CheckpointError(f"{directory}: missing parameter(s) {missing[:5]}")
    model.load_state_dict(tensors, assign=True)
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    return model.to(device).eval()


def save_model(model: Qwen3, directory: str | Path, source: str | Path | None = None) -> None:
    """Write `model` as an HF checkpoint; copy tokenizer files from `source` when given.

    The directory is assembled beside its destination and renamed into place, so a killed job
    never leaves a checkpoint that looks complete but is not.
    """
    if model.packed:
        raise ValueError(f"cannot save {directory}: the model's weights are packed for inference")
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    if model.cfg.tie_word_embeddings:
        state.pop("lm_head.weight")
    source_config = Path(source) / "config.json" if source is not None else None
    config = json.loads(source_config.read_text()) if source_config and source_config.is_file() else {}
    config |= model.cfg.to_dict() | {"torch_dtype": str(model.dtype).removeprefix("torch.")}
    with atomic_dir(directory) as staging:
        with atomic_path(staging / WEIGHTS) as tmp:  # for the file mode: staging is atomic already
            save_file(state, tmp, metadata={"format": "pt"})
        (staging / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        for name in COMPANION_FILES if source is not None else ():
            if (Path(source) / name).is_file():
                shutil.copy2(Path(source) / name, staging / name)
