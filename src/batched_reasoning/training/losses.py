"""The token-level losses: over chosen positions, averaged per example then over the batch, so
batch size 1 and batch size N optimise the same objective (or over all tokens, for pretraining)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def packed_token_mean_nll(model, input_ids, segment_ids, loss_mask) -> torch.Tensor:
    """`token_mean_nll` of packed rows (`pack`): the same value as for the examples padded one
    per row, from hidden states projected to the vocabulary only where a target is scored."""
    targets = loss_mask[:, 1:]
    hidden = model.hidden_states(input_ids, segment_ids=segment_ids)[:, :-1][targets]
    logits = model.logits_at(hidden)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    return F.cross_entropy(logits, input_ids[:, 1:][targets], reduction="mean")


def token_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Log-probability of each next token: (batch, time - 1); entry t scores token t + 1."""
    logits = model(input_ids, attention_mask)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # float64 stays float64
    logprobs = F.log_softmax(logits[:, :-1], dim=-1)
    return logprobs.gather(-1, input_ids[:, 1:, None]).squeeze(-1)


def masked_nll(model, input_ids, attention_mask, loss_mask) -> torch.Tensor:
    """Mean negative log-likelihood of the tokens where `loss_mask` is True.

    `loss_mask` marks target tokens (batch, time); position 0 is never a target. Each example's
    loss is its mean over its own targets; the batch loss is the mean over examples.
    """
    targets = loss_mask[:, 1:].float()
    nll = -token_logprobs(model, input_ids, attention_mask) * targets
    return (nll.sum(-1) / targets.sum(-1).clamp(min=1)).mean()


def token_mean_nll(model, input_ids, attention_mask, loss_mask) -> torch.Tensor:
    """Mean negative log-likelihood over every target token of the batch, as language-model
    pretraining averages: a long worked answer weighs by its length, not as one example."""
    targets = loss_mask[:, 1:].float()
    nll = -token_logprobs(model, input_ids, attention_mask) * targets
    return nll.sum() / targets.sum().clamp(min=1)
