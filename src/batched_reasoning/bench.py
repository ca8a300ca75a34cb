"""Generation benchmark: tokens/s, prefill/decode time and peak memory of every strategy and
batch size on one checkpoint, optionally against the book's batched generation on the same
weights and left-padded prompts.

    python -m batched_reasoning.bench --make-checkpoint ckpt/qwen3-0.6b-random \\
        --shape qwen3-0.6b --tokenizer path/to/qwen3/tokenizer.json
    python -m batched_reasoning.bench --checkpoint ckpt/qwen3-0.6b-random \\
        --prompts math500_test.json --n-prompts 8 --batch-sizes 1,2,4,8 --no-eos \\
        --max-new-tokens 64 --threads 2 --book --csv bench.csv --json bench.json

Random weights are enough to time generation: the work per token depends on the shape, not on
the values. `--no-eos` makes every row run the full `--max-new-tokens`, so all strategies do the
same work and random weights cannot end rows early by chance.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from .book_compat import to_book_model
from .checkpoint import load_model, save_model
from .config import Qwen3Config
from .data import load_records
from .generation import STRATEGIES, generate
from .io import write_json
from .memory import PeakMemory
from .model import Qwen3
from .padding import batches, left_pad
from .prompts import PROMPT_STYLES, TextTokenizer, format_prompt
from .provenance import device_name, package_versions, resolve_device
from .toy import init_weights

SHAPES = {
    # Qwen3-0.6B's architecture (its config.json); the vocabulary is the real model's.
    "qwen3-0.6b": dict(
        vocab_size=151_936, hidden_size=1024, num_hidden_layers=28, num_attention_heads=16,
        num_key_value_heads=8, head_dim=128, intermediate_size=3072,
        rope_theta=1_000_000.0, tie_word_embeddings=True, max_position_embeddings=40_960,
    ),
    # Same layout, small enough for tests; the vocabulary is sized to the tokenizer.
    "tiny": dict(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, intermediate_size=128, max_position_embeddings=2048,
    ),
}
SYNTHETIC_LENGTHS = (32, 256)  # token range of synthetic prompts, about MATH-500's spread


def make_checkpoint(shape: str, tokenizer_path: str | Path, out_dir: str | Path, seed: int = 0) -> None:
    """A randomly initialised (seeded) checkpoint of `shape` with the given tokenizer."""
    from tokenizers import Tokenizer

    tokenizer_vocab = Tokenizer.from_file(str(tokenizer_path)).get_vocab_size(with_added_tokens=True)
    values = {"vocab_size": tokenizer_vocab} | SHAPES[shape]
    if values["vocab_size"] < tokenizer_vocab:
        raise ValueError(f"{tokenizer_path}: {tokenizer_vocab} tokens, more than {shape}'s vocabulary")
    model = init_weights(Qwen3(Qwen3Config(**values)), seed)
    with tempfile.TemporaryDirectory() as source:
        (Path(source) / "tokenizer.json").write_bytes(Path(tokenizer_path).read_bytes())
        save_model(model, out_dir, source=source)


def load_prompts(path: str | None, n: int, tokenizer: TextTokenizer, style: str, vocab_size: int,
                 seed: int = 0) -> list[list[int]]:
    """The first `n` problems of a MATH-500-format file as token ids, or `n` synthetic prompts."""
    if path is not None:
        records = load_records(path)[:n]
        return [tokenizer.encode(format_prompt(r["problem"], style)) for r in records]
    rng = random.Random(seed)
    return [[rng.randrange(vocab_size) for _ in range(rng.randint(*SYNTHETIC_LENGTHS))]
            for _ in range(n)]


@dataclass
class Run:
    tokens: list[list[int]]
    wall_seconds: float
    peak_memory_mb: float
    prefill_seconds: float = float("nan")
    decode_seconds: float = float("nan")


def run_ours(model, prompts, strategy, batch_size, max_new_tokens, eos_token_id, pad_token_id) -> Run:
    with PeakMemory(model.device) as memory:
        start = time.perf_counter()
        result = generate(model, prompts, strategy=strategy, batch_size=batch_size,
                          max_new_tokens=max_new_tokens, eos_token_id=eos_token_id,
                          pad_token_id=pad_token_id)
        wall = time.perf_counter() - start
    return Run(result.tokens, wall, memory.peak_mb, result.prefill_seconds, result.decode_seconds)


def run_book(book_model, prompts, strategy, batch_size, max_new_tokens, eos_token_id,
             pad_token_id, device) -> Run:
    """The book's generation over the same left-padded batches, in input order."""
    from reasoning_from_scratch import qwen3_batched

    generate_batch = {
        "batched": qwen3_batched.generate_text_basic_batched_cache,
        "batched_stop": qwen3_batched.generate_text_basic_batched_cache_stop,
    }[strategy]
    tokens = []
    with PeakMemory(device) as memory:
        start = time.perf_counter()
        for rows in batches(range(len(prompts)), batch_size):
            input_ids, attention_mask = left_pad([prompts[r] for r in rows], pad_token_id, device)
            out = generate_batch(book_model, input_ids, max_new_tokens, eos_token_id=eos_token_id,
                                 attn_mask=attention_mask, pad_id=pad_token_id)
            tokens.extend(cut_at(row, eos_token_id) for row in out.tolist())
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        wall = time.perf_counter() - start
    return Run(tokens, wall, memory.peak_mb)


def cut_at(ids: list[int], eos_token_id: int | None) -> list[int]:
    """The answer without its end token (and the end tokens the book pads finished rows with)."""
    return ids[: ids.index(eos_token_id)] if eos_token_id in ids else ids


def batch_pad_fraction(lengths: list[int], batch_size: int) -> float:
    """Share of padding over all the left-padded batches of `batch_size` in input order."""
    cells = sum(len(g) * max(g) for g in batches(lengths, batch_size))
    return 1 - sum(lengths) / cells


def benchmark(model, prompts, *, strategies, batch_sizes, max_new_tokens, eos_token_id,
              pad_token_id, book: bool) -> pd.DataFrame:
    """One row per implementation x strategy x batch size (sequential: batch size 1 only)."""
    # Ours and the book's run back to back per batch size, so that load from other processes
    # on a shared machine shifts both sides of a comparison alike.
    plan = [("ours", "sequential", 1)] if "sequential" in strategies else []
    for batch_size in batch_sizes:
        for strategy in ("batched", "batched_stop"):
            if strategy in strategies:
                plan.append(("ours", strategy, batch_size))
            if book:
                plan.append(("book", strategy, batch_size))
    if book:
        book_model = to_book_model(model)
    args = dict(max_new_tokens=max_new_tokens, eos_token_id=eos_token_id, pad_token_id=pad_token_id)
    # Warm-up: the first call pays one-time costs (thread pools, allocator growth).
    warm_up = args | {"max_new_tokens": 2}
    run_ours(model, prompts[:1], "sequential", 1, **warm_up)
    if book:
        run_book(book_model, prompts[:1], "batched", 1, **warm_up, device=model.device)
    lengths = [len(p) for p in prompts]
    rows, outputs = [], {}
    for implementation, strategy, batch_size in plan:
        if implementation == "ours":
            run = run_ours(model, prompts, strategy, batch_size, **args)
        else:
            run = run_book(book_model, prompts, strategy, batch_size, **args, device=model.device)
        outputs[implementation, strategy, batch_size] = run.tokens
        generated = sum(len(t) for t in run.tokens)
        rows.append({
            "implementation": implementation, "strategy": strategy, "batch_size": batch_size,
            "n_prompts": len(prompts), "generated_tokens": generated,
            "pad_fraction": batch_pad_fraction(lengths, 1 if strategy == "sequential" else batch_size),
            "wall_s": run.wall_seconds, "prefill_s": run.prefill_seconds,
            "decode_s": run.decode_seconds, "tokens_per_s": generated / run.wall_seconds,
            "peak_mem_mb": run.peak_memory_mb,
        })
        print(f"{implementation} {strategy} bs={batch_size}: {generated / run.wall_seconds:.2f} tokens/s",
              flush=True)
    table = pd.DataFrame(rows)
    return add_comparisons(table, outputs)


def add_comparisons(table: pd.DataFrame, outputs: dict) -> pd.DataFrame:
    """Speedup over our sequential run, ours/book tokens/s ratio, and agreement of the tokens."""
    table = table.copy()
    baseline = outputs.get(("ours", "sequential", 1))
    sequential = table[(table.implementation == "ours") & (table.strategy == "sequential")]
    base_speed = sequential.tokens_per_s.iloc[0] if len(sequential) else float("nan")
    table["speedup_vs_sequential"] = table.tokens_per_s / base_speed
    speed = table.set_index(["implementation", "strategy", "batch_size"]).tokens_per_s
    table["ours_vs_book"] = [
        r.tokens_per_s / speed[("book", r.strategy, r.batch_size)]
        if r.implementation == "ours" and ("book", r.strategy, r.batch_size) in speed.index
        else float("nan")
        for r in table.itertuples()
    ]
    # Share of prompts whose tokens equal our sequential run's (float32 greedy: expect 1.0).
    table["same_as_sequential"] = [
        sum(a == b for a, b in zip(outputs[key], baseline)) / len(baseline) if baseline else float("nan")
        for key in zip(table.implementation, table.strategy, table.batch_size)
    ]
    return table


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m batched_reasoning.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", help="model directory (config.json, tokenizer.json, safetensors)")
    parser.add_argument("--make-checkpoint", metavar="OUT",
                        help="write a random checkpoint of --shape with --tokenizer to OUT and exit")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-0.6b")
    parser.add_argument("--tokenizer", help="tokenizer.json for --make-checkpoint")
    parser.add_argument("--seed", type=int, default=0, help="weight init and synthetic prompts")
    parser.add_argument("--prompts", help="MATH-500-format JSON/JSONL (default: synthetic prompts)")
    parser.add_argument("--n-prompts", type=int, default=16, help="first N problems / N synthetic")
    parser.add_argument("--prompt-style", choices=PROMPT_STYLES, default="base")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--batch-sizes", default="1,2,4,8,16")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--no-eos", action="store_true", help="never stop early: every row runs full length")
    parser.add_argument("--book", action="store_true",
                        help="also time the book's batched generation (reasoning_from_scratch)")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    parser.add_argument("--csv", default="bench.csv")
    parser.add_argument("--json", help="also write rows and provenance as JSON")
    args = parser.parse_args(argv)
    if args.make_checkpoint and not args.tokenizer:
        parser.error("--make-checkpoint needs --tokenizer")
    if not args.make_checkpoint and not args.checkpoint:
        parser.error("give --checkpoint (or --make-checkpoint)")
    unknown = set(args.strategies.split(",")) - set(STRATEGIES)
    if unknown:
        parser.error(f"unknown strategies {sorted(unknown)}; choose from {STRATEGIES}")
    return args


def main(argv=None) -> pd.DataFrame | None:
    args = parse_args(argv)
    if args.make_checkpoint:
        make_checkpoint(args.shape, args.tokenizer, args.make_checkpoint, args.seed)
        print(f"wrote {args.shape} checkpoint to {args.make_checkpoint}")
        return None
    device = resolve_device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    tokenizer = TextTokenizer.from_model_dir(args.checkpoint, args.prompt_style)
    model = load_model(args.checkpoint, dtype=args.dtype, device=device)
    prompts = load_prompts(args.prompts, args.n_prompts, tokenizer, args.prompt_style,
                           model.cfg.vocab_size, args.seed)
    lengths = [len(p) for p in prompts]
    print(f"{len(prompts)} prompts, {min(lengths)}-{max(lengths)} tokens (mean "
          f"{sum(lengths) / len(lengths):.0f}); {device_name(device)}", flush=True)
    table = benchmark(
        model, prompts, strategies=args.strategies.split(","),
        batch_sizes=[int(b) for b in args.batch_sizes.split(",")],
        max_new_tokens=args.max_new_tokens, book=args.book,
        eos_token_id=None if args.no_eos else tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    print(table.to_markdown(index=False, floatfmt=".3g"))
    Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.csv, index=False)
    if args.json:
        write_json({"args": vars(args), "device": device.type, "device_name": device_name(device),
                    "torch_version": torch.__version__, "packages": package_versions(),
                    "prompt_lengths": lengths, "rows": table.to_dict(orient="records")}, args.json)
    return table


if __name__ == "__main__":
    main()
