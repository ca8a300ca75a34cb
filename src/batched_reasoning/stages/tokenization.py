"""Stage `tokenize`: render prompts, pad them into batches, and the batches' reader.

It never runs the model, so its code hash (`provenance`) covers neither the model nor
generation: editing those reruns evaluation, not tokenization.
"""

from __future__ import annotations

import torch
from safetensors.torch import load_file, save_file

from ..core.io import atomic_path, read_jsonl, write_json
from ..engine.padding import batches, left_pad, length_sorted, pad_fraction
from ..data.prompts import TextTokenizer, format_prompt


def tokenize(
    tokenizer_dir: str, records_path: str, out_batches: str, out_stats: str, *,
    prompt_style: str, batch_size: int, sort_by_length: bool, limit: int | None,
) -> None:
    """Write the left-padded batches (safetensors) and padding statistics (JSON). It reads
    only the tokenizer (`tokenizer_dir`: tokenizer.json and the end tokens a checkpoint
    declares), so a model's new weights or code tokenize nothing again.

    Statistics cover both input order and length-sorted order, so the padding that sorting saves
    is visible whichever the config picks.
    """
    tokenizer = TextTokenizer.from_model_dir(tokenizer_dir, prompt_style)
    records = read_jsonl(records_path)[:limit]
    prompts = [tokenizer.encode(format_prompt(r["problem"], prompt_style)) for r in records]
    lengths = [len(p) for p in prompts]
    orders = {"input": list(range(len(prompts))), "sorted": length_sorted(lengths)}
    stats = {"batch_size": batch_size, "sort_by_length": sort_by_length, "n_prompts": len(prompts),
             "prompt_tokens": sum(lengths), "max_prompt_tokens": max(lengths)}
    for name, order in orders.items():
        groups = [[lengths[r] for r in g] for g in batches(order, batch_size)]
        stats[f"pad_fraction_{name}"] = pad_fraction(groups)
        stats[f"batch_pad_fractions_{name}"] = [pad_fraction([g]) for g in groups]
    tensors = {}
    for index, rows in enumerate(batches(orders["sorted" if sort_by_length else "input"], batch_size)):
        input_ids, attention_mask = left_pad([prompts[r] for r in rows], tokenizer.pad_token_id)
        tensors[f"{index:06d}.input_ids"] = input_ids
        tensors[f"{index:06d}.attention_mask"] = attention_mask
        tensors[f"{index:06d}.rows"] = torch.tensor(rows)
    with atomic_path(out_batches) as tmp:
        save_file(tensors, tmp)
    stats["pad_fraction"] = stats["pad_fraction_sorted" if sort_by_length else "pad_fraction_input"]
    write_json(stats, out_stats)


def load_batches(path: str) -> tuple[list[list[int]], list[int]]:
    """Prompts (input order, padding removed) and the order they were batched in."""
    tensors = load_file(path)
    prefixes = sorted({k.split(".")[0] for k in tensors})
    order, by_row = [], {}
    for prefix in prefixes:
        ids, mask = tensors[f"{prefix}.input_ids"], tensors[f"{prefix}.attention_mask"]
        for row, r in enumerate(tensors[f"{prefix}.rows"].tolist()):
            by_row[r] = ids[row][mask[row]].tolist()
            order.append(r)
    return [by_row[r] for r in range(len(order))], order
