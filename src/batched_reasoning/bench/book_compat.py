"""Our model's weights in the book's batched `Qwen3Model`, so both implementations are timed on
the same weights and prompts (the book's package `reasoning_from_scratch` is optional).

The book names modules differently (`trf_blocks.0.att.W_query` for our
`model.layers.0.self_attn.q_proj`, `scale` for a norm's `weight`); `book_state_dict` renames.
The book's model then shares our tensors, so a second copy of the weights is never made.
"""

from __future__ import annotations

import torch

from ..model.qwen3 import Qwen3

BOOK_EPS = 1e-6  # the book's RMSNorm eps is fixed, not read from its config

# Our per-layer parameter names (after `model.layers.{i}.`) -> the book's (after `trf_blocks.{i}.`).
LAYER_NAMES = {
    "self_attn.q_proj.weight": "att.W_query.weight",
    "self_attn.k_proj.weight": "att.W_key.weight",
    "self_attn.v_proj.weight": "att.W_value.weight",
    "self_attn.o_proj.weight": "att.out_proj.weight",
    "self_attn.q_norm.weight": "att.q_norm.scale",
    "self_attn.k_norm.weight": "att.k_norm.scale",
    "input_layernorm.weight": "norm1.scale",
    "post_attention_layernorm.weight": "norm2.scale",
    "mlp.gate_proj.weight": "ff.fc1.weight",
    "mlp.up_proj.weight": "ff.fc2.weight",
    "mlp.down_proj.weight": "ff.fc3.weight",
}
TOP_NAMES = {
    "model.embed_tokens.weight": "tok_emb.weight",
    "model.norm.weight": "final_norm.scale",
    "lm_head.weight": "out_head.weight",
}


def book_config(model: Qwen3) -> dict:
    """The book's config dict for our model's shape; refuses what the book cannot express."""
    cfg = model.cfg
    if cfg.attention_bias:
        raise ValueError("the book's Qwen3Model has no attention biases")
    if cfg.rms_norm_eps != BOOK_EPS:
        raise ValueError(f"the book's RMSNorm uses eps={BOOK_EPS}, the model {cfg.rms_norm_eps}")
    return {
        "vocab_size": cfg.vocab_size,
        "context_length": cfg.max_position_embeddings,
        "emb_dim": cfg.hidden_size,
        "n_heads": cfg.num_attention_heads,
        "n_layers": cfg.num_hidden_layers,
        "hidden_dim": cfg.intermediate_size,
        "head_dim": cfg.head_dim,
        "qk_norm": True,
        "n_kv_groups": cfg.num_key_value_heads,
        "rope_base": cfg.rope_theta,
        "dtype": model.dtype,
    }


def book_name(name: str) -> str:
    if name in TOP_NAMES:
        return TOP_NAMES[name]
    _, _, index, rest = name.split(".", 3)  # model.layers.{i}.{rest}
    return f"trf_blocks.{index}.{LAYER_NAMES[rest]}"


def book_state_dict(model: Qwen3) -> dict[str, torch.Tensor]:
    """Our parameters under the book's names (the same tensors, not copies)."""
    return {book_name(name): p for name, p in model.state_dict().items()}


def to_book_model(model: Qwen3):
    """The book's batched `Qwen3Model` running on `model`'s weights, on the same device."""
    from reasoning_from_scratch.qwen3_batched import Qwen3Model, compute_rope_params

    cfg = book_config(model)
    with torch.device("meta"):  # no throwaway random init of a full-size model
        book = Qwen3Model(cfg)
    book.load_state_dict(book_state_dict(model), assign=True, strict=True)
    cos, sin = compute_rope_params(cfg["head_dim"], cfg["rope_base"], cfg["context_length"])
    book.cos, book.sin = cos.to(model.device), sin.to(model.device)
    return book.eval()
