"""Generation benchmark: tokens/s, prefill/decode time and peak memory of every strategy and
batch size on one checkpoint, optionally against the book's batched generation and Hugging Face
`transformers` `generate` on the same weights and left-padded prompts.

    python -m batched_reasoning.bench --make-checkpoint ckpt/qwen3-0.6b-random \\
        --shape qwen3-0.6b --tokenizer path/to/qwen3/tokenizer.json
    python -m batched_reasoning.bench --checkpoint ckpt/qwen3-0.6b-random \\
        --prompts math500_test.json --n-prompts 16 --batch-sizes 1,4,8,16 \\
        --strategies batched_stop,continuous --answer-lengths 16,256 --threads 2 \\
        --book --transformers --csv bench.csv --json bench.json

Random weights are enough to time generation: the work per token depends on the shape, not on
the values. But a random model ends its answers only by chance, so their lengths are set:

- `--no-eos`: every row runs the full `--max-new-tokens` (no end token at all).
- `--answer-lengths MIN,MAX`: prompt i gets a length n_i drawn (seeded) uniformly from
  [MIN, MAX]. Every implementation samples greedily from logits whose end-token column is
  edited just before the argmax: -inf while the row has fewer than n_i tokens, +inf once it has
  n_i. So each row ends with the end token right after n_i tokens, wherever it runs: ours (a
  sampler, `ForcedLengths`), the book's loops (a wrapper around its model, `ForcedLengthsBook`)
  and `transformers` (a logits processor, `ForcedLengthsProcessor`). A row needs the same
  forward passes everywhere (n_i tokens, then the one whose logits yield the end token); what
  happens to finished rows is the implementation's own (`transformers` keeps them in the batch,
  as our `batched` does). The edit is one column write per step, negligible next to a forward
  pass. A row that does not end at n_i is an error, so all rows of the table count the same
  `generated_tokens`.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pandas as pd
import torch

from . import llama_cpp
from .book_compat import to_book_model
from ..core.calibration import choices_made
from ..model.checkpoint import load_model, save_model
from ..model.config import QWEN3_SHAPES, Qwen3Config, resolve_dtype
from ..core.cpu_class import CPU_CLASSES, current_cpu_class, environment_for
from ..data.records import load_records
from ..core.devices import device_name, resolve_device, synchronize
from ..engine.compiled import MODES
from ..engine.generation import STRATEGIES, Greedy, generate
from ..core.io import write_json
from ..core.memory import MEASURES, PeakMemory
from ..model.qwen3 import Qwen3
from ..engine.padding import batches, left_pad, pad_fraction
from ..data.prompts import PROMPT_STYLES, TextTokenizer, format_prompt
from ..core.provenance import code_hash, package_versions
from .roofline import decode_table, measure_machine
from ..world.toy import init_weights

SHAPES = {
    # Qwen3-0.6B's architecture (its config.json); the vocabulary is the real model's.
    "qwen3-0.6b": dataclasses.asdict(QWEN3_SHAPES["qwen3-0.6b"]),
    # Same layout, small enough for tests; the vocabulary is sized to the tokenizer.
    "tiny": dict(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, intermediate_size=128, max_position_embeddings=2048,
    ),
}
SYNTHETIC_LENGTHS = (32, 256)  # token range of synthetic prompts, about MATH-500's spread


def make_checkpoint(shape: str, tokenizer_path: str | Path, out_dir: str | Path, seed: int = 0,
                    dtype: str = "float32") -> None:
    """A randomly initialised (seeded) checkpoint of `shape` with the given tokenizer, its
    weights stored in `dtype` (bfloat16 halves a GPU check's files)."""
    from tokenizers import Tokenizer

    tokenizer_vocab = Tokenizer.from_file(str(tokenizer_path)).get_vocab_size(with_added_tokens=True)
    values = {"vocab_size": tokenizer_vocab} | SHAPES[shape]
    if values["vocab_size"] < tokenizer_vocab:
        raise ValueError(f"{tokenizer_path}: {tokenizer_vocab} tokens, more than {shape}'s vocabulary")
    model = init_weights(Qwen3(Qwen3Config(**values)), seed).to(resolve_dtype(dtype))
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
    prefills: float = float("nan")  # prompts prefilled (ours: repeats share one prefill)
    decode_mode: str = ""  # ours: eager or compiled (`engine.compiled`)
    graphs: int = 0
    compile_seconds: float = 0.0


def draw_answer_lengths(n: int, low: int, high: int, seed: int = 0) -> list[int]:
    """Each prompt's answer length, uniform on [low, high], seeded."""
    rng = random.Random(seed)
    return [rng.randint(low, high) for _ in range(n)]


def force_end(logits: torch.Tensor, at_end: torch.Tensor, eos_token_id: int) -> torch.Tensor:
    """Edit (rows, vocab) `logits` in place so that the argmax is the end token exactly on the
    rows where `at_end` is true, and never on the others."""
    logits[:, eos_token_id] = torch.where(at_end, torch.inf, -torch.inf)
    return logits


class ForcedLengths(Greedy):
    """Our sampler interface: greedy, and prompt i ends after exactly `lengths[i]` tokens."""

    def __init__(self, lengths: list[int], eos_token_id: int):
        self.lengths, self.eos_token_id = lengths, eos_token_id

    def start(self, keys, device) -> None:
        self.generated = [0] * len(self.lengths)  # tokens sampled so far, per prompt

    def __call__(self, logits: torch.Tensor, rows: list[int]) -> torch.Tensor:
        at_end = [self.generated[r] == self.lengths[r] for r in rows]
        for r in rows:
            self.generated[r] += 1
        at_end = torch.tensor(at_end, device=logits.device)
        return super().__call__(force_end(logits, at_end, self.eos_token_id), rows)


class ForcedLengthsBook(torch.nn.Module):
    """The book's model, with row i of the batch ending after exactly `lengths[i]` tokens.

    The book's loops take the argmax of the last position's logits, one call per step (call 0
    is the prefill), so call k samples every present row's token k + 1. Its `_stop` variant
    drops a row once the row has sampled the end token; a call with fewer rows than the batch
    therefore holds, in order, the rows whose answer is not over: those with length >= k.
    """

    def __init__(self, book_model, lengths: list[int], eos_token_id: int):
        super().__init__()
        self.book, self.cfg = book_model, book_model.cfg
        self.lengths, self.eos_token_id = lengths, eos_token_id
        self.calls = 0

    def forward(self, in_idx, cache=None, attn_mask=None):
        logits = self.book(in_idx, cache=cache, attn_mask=attn_mask)
        lengths = self.lengths
        if logits.shape[0] < len(lengths):
            lengths = [n for n in lengths if n >= self.calls]
        at_end = torch.tensor([n == self.calls for n in lengths], device=logits.device)
        force_end(logits[:, -1], at_end, self.eos_token_id)
        self.calls += 1
        return logits


class ForcedLengthsProcessor:
    """A `transformers` logits processor: row i of the batch ends after `lengths[i]` tokens.

    `generate` keeps every row in the batch, so the tokens generated so far are the columns of
    `input_ids` past the (left-padded) prompt width.
    """

    def __init__(self, lengths: list[int], prompt_width: int, eos_token_id: int, device):
        self.lengths = torch.tensor(lengths, device=device)
        self.prompt_width, self.eos_token_id = prompt_width, eos_token_id

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        at_end = self.lengths == input_ids.shape[1] - self.prompt_width
        return force_end(scores, at_end, self.eos_token_id)


def run_ours(model, prompts, strategy, batch_size, max_new_tokens, eos_token_id, pad_token_id,
             answer_lengths=None, compile="off") -> Run:
    """One timed run; compiled (`compile` on), after an untimed one that traces every shape,
    whose compile time and graphs the run reports."""
    def once():
        sampler = ForcedLengths(answer_lengths, eos_token_id) if answer_lengths else None
        return generate(model, prompts, strategy=strategy, batch_size=batch_size,
                        max_new_tokens=max_new_tokens, eos_token_id=eos_token_id,
                        pad_token_id=pad_token_id, sampler=sampler, compile=compile)

    traced = once() if compile == "on" else None
    with PeakMemory(model.device) as memory:
        start = time.perf_counter()
        result = once()
        wall = time.perf_counter() - start
    return Run(result.tokens, wall, memory.peak_mb, result.prefill_seconds, result.decode_seconds,
               result.prefills, result.compiled, (traced or result).graphs,
               (traced or result).compile_seconds)


def run_book(book_model, prompts, strategy, batch_size, max_new_tokens, eos_token_id,
             pad_token_id, device, answer_lengths=None) -> Run:
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
            model = book_model
            if answer_lengths:
                model = ForcedLengthsBook(book_model, [answer_lengths[r] for r in rows], eos_token_id)
            input_ids, attention_mask = left_pad([prompts[r] for r in rows], pad_token_id, device)
            out = generate_batch(model, input_ids, max_new_tokens, eos_token_id=eos_token_id,
                                 attn_mask=attention_mask, pad_id=pad_token_id)
            tokens.extend(cut_at(row, eos_token_id) for row in out.tolist())
        synchronize(device)
        wall = time.perf_counter() - start
    return Run(tokens, wall, memory.peak_mb)


def load_transformers(checkpoint: str | Path, dtype: str, device: torch.device):
    """Hugging Face's Qwen3 on the same checkpoint (ours are Hugging Face directories)."""
    import transformers

    transformers.logging.disable_progress_bar()
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=resolve_dtype(dtype))
    return model.to(device).eval()


def run_transformers(hf_model, prompts, batch_size, max_new_tokens, eos_token_id, pad_token_id,
                     answer_lengths=None) -> Run:
    """`transformers` greedy `generate` (its default cache and attention) over the same
    left-padded batches, in input order."""
    from transformers import LogitsProcessorList

    device = hf_model.device
    tokens = []
    with PeakMemory(device) as memory:
        start = time.perf_counter()
        for rows in batches(range(len(prompts)), batch_size):
            input_ids, attention_mask = left_pad([prompts[r] for r in rows], pad_token_id, device)
            width = input_ids.shape[1]
            processors = LogitsProcessorList()
            if answer_lengths:
                processors.append(ForcedLengthsProcessor(
                    [answer_lengths[r] for r in rows], width, eos_token_id, device))
            out = hf_model.generate(input_ids, attention_mask=attention_mask.long(),
                                    max_new_tokens=max_new_tokens, do_sample=False,
                                    eos_token_id=eos_token_id, pad_token_id=pad_token_id,
                                    logits_processor=processors)
            tokens.extend(cut_at(row, eos_token_id) for row in out[:, width:].tolist())
        wall = time.perf_counter() - start
    return Run(tokens, wall, memory.peak_mb)


def cut_at(ids: list[int], eos_token_id: int | None) -> list[int]:
    """The answer without its end token (and the tokens others pad finished rows with)."""
    return ids[: ids.index(eos_token_id)] if eos_token_id in ids else ids


BOOK_STRATEGIES = ("batched", "batched_stop")


def run_plan(strategies, batch_sizes, book: bool, transformers: bool) -> list[tuple]:
    """(implementation, strategy, batch size) in the order they run: ours and theirs back to
    back per batch size, so that load from other processes on a shared machine shifts both
    sides of a comparison alike; batch sizes ascending, since packing (see
    `Qwen3.pack_for_inference`) is one-way."""
    plan = [("ours", "sequential", 1)] if "sequential" in strategies else []
    for batch_size in sorted(batch_sizes):
        for strategy in strategies:
            if strategy != "sequential":
                plan.append(("ours", strategy, batch_size))
            if book and strategy in BOOK_STRATEGIES:
                plan.append(("book", strategy, batch_size))
        if transformers:
            plan.append(("transformers", "generate", batch_size))
    return plan


def benchmark(model, prompts, *, strategies, batch_sizes, max_new_tokens, eos_token_id,
              pad_token_id, book: bool, transformers_model=None,
              answer_lengths: list[int] | None = None, compile: str = "off") -> pd.DataFrame:
    """One row per implementation x strategy x batch size (sequential: batch size 1 only).

    `answer_lengths` (one per prompt) end every row there (see the module docstring); the
    generation limit is then one past the longest, so the forced end token always fits.
    `model` is packed for inference (one-way) from the first batch size where that is faster.
    """
    if answer_lengths:
        if eos_token_id is None:
            raise ValueError("answer lengths end rows with the end token: give eos_token_id")
        max_new_tokens = max(answer_lengths) + 1
    plan = run_plan(strategies, batch_sizes, book, transformers_model is not None)
    if book:
        book_model = to_book_model(model)
    args = dict(max_new_tokens=max_new_tokens, eos_token_id=eos_token_id, pad_token_id=pad_token_id)
    # Warm-up: the first call pays one-time costs (thread pools, allocator growth).
    warm_up = args | {"max_new_tokens": 2}
    run_ours(model, prompts[:1], "sequential", 1, **warm_up)
    if book:
        run_book(book_model, prompts[:1], "batched", 1, **warm_up, device=model.device)
    if transformers_model is not None:
        run_transformers(transformers_model, prompts[:1], 1, **warm_up)
    args |= {"answer_lengths": answer_lengths}
    lengths = [len(p) for p in prompts]
    rows, outputs = [], {}
    for implementation, strategy, batch_size in plan:
        if implementation == "ours":
            model.pack_for_inference(batch_size)
            run = run_ours(model, prompts, strategy, batch_size, **args, compile=compile)
        elif implementation == "book":
            run = run_book(book_model, prompts, strategy, batch_size, **args, device=model.device)
        else:
            run = run_transformers(transformers_model, prompts, batch_size, **args)
        if answer_lengths and [len(t) for t in run.tokens] != answer_lengths:
            raise RuntimeError(f"{implementation} {strategy} bs={batch_size}: answers of "
                               f"{[len(t) for t in run.tokens]} tokens, not {answer_lengths}")
        outputs[implementation, strategy, batch_size] = run.tokens
        generated = sum(len(t) for t in run.tokens)
        padded = implementation != "ours" or strategy in BOOK_STRATEGIES
        rows.append({
            "implementation": implementation, "strategy": strategy, "batch_size": batch_size,
            "n_prompts": len(prompts), "generated_tokens": generated,
            "pad_fraction": pad_fraction(batches(lengths, batch_size)) if padded else 0.0,
            "wall_s": run.wall_seconds, "prefill_s": run.prefill_seconds,
            "decode_s": run.decode_seconds, "prefills": run.prefills,
            "tokens_per_s": generated / run.wall_seconds,
            "peak_mem_mb": run.peak_memory_mb, "memory_measure": MEASURES[model.device.type],
            "packed_weights": implementation == "ours" and model.packed,
            "decode_mode": run.decode_mode, "graphs": run.graphs,
            "compile_s": run.compile_seconds,
        })
        print(f"{implementation} {strategy} bs={batch_size}: {generated / run.wall_seconds:.2f} tokens/s",
              flush=True)
    table = pd.DataFrame(rows)
    return add_comparisons(table, outputs)


def add_comparisons(table: pd.DataFrame, outputs: dict) -> pd.DataFrame:
    """Speedup over our sequential run, our tokens/s over the book's (same strategy and batch
    size) and over `transformers`' (same batch size), and agreement of the tokens."""
    table = table.copy()
    baseline = outputs.get(("ours", "sequential", 1))
    sequential = table[(table.implementation == "ours") & (table.strategy == "sequential")]
    base_speed = sequential.tokens_per_s.iloc[0] if len(sequential) else float("nan")
    table["speedup_vs_sequential"] = table.tokens_per_s / base_speed
    speed = table.set_index(["implementation", "strategy", "batch_size"]).tokens_per_s

    def ours_over(r, key):
        ours = r.implementation == "ours" and key in speed.index
        return r.tokens_per_s / speed[key] if ours else float("nan")

    rows = list(table.itertuples())
    table["ours_vs_book"] = [ours_over(r, ("book", r.strategy, r.batch_size)) for r in rows]
    table["ours_vs_transformers"] = [ours_over(r, ("transformers", "generate", r.batch_size))
                                     for r in rows]
    # Share of prompts whose tokens equal our sequential run's (float32 greedy: expect 1.0).
    table["same_as_sequential"] = [
        sum(a == b for a, b in zip(outputs[key], baseline)) / len(baseline) if baseline else float("nan")
        for key in zip(table.implementation, table.strategy, table.batch_size)
    ]
    return table


def make_parser() -> argparse.ArgumentParser:
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
    parser.add_argument("--samples", type=int, default=1,
                        help="answers per prompt, batched problem by problem as self-consistency "
                             "and GRPO batch them (each answer gets its own forced length)")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--batch-sizes", default="1,2,4,8,16")
    parser.add_argument("--max-new-tokens", type=int, default=64,
                        help="answer length limit (with --answer-lengths: one past MAX)")
    parser.add_argument("--no-eos", action="store_true", help="never stop early: every row runs full length")
    parser.add_argument("--answer-lengths", metavar="MIN,MAX",
                        help="end prompt i's answer after n_i tokens, n_i drawn from [MIN, MAX]")
    parser.add_argument("--book", action="store_true",
                        help="also time the book's batched generation (reasoning_from_scratch)")
    parser.add_argument("--transformers", action="store_true",
                        help="also time Hugging Face transformers' generate on the checkpoint")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--compile", choices=MODES, default="off",
                        help="how our decode steps run (engine.compiled); on: each run after an "
                             "untimed one that compiles every shape")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    parser.add_argument("--cpu-class", choices=list(CPU_CLASSES),
                        help="run as this class of CPU (cpu_class.py: e.g. avx2, a laptop); "
                             "default: this process's own")
    parser.add_argument("--decode-context", type=int,
                        help="cached positions of the profiled decode step (default: mean prompt length)")
    parser.add_argument("--llama-batched-bench", metavar="BINARY",
                        help="also time llama.cpp's llama-batched-bench on --gguf "
                             "(see docs/benchmarking.md)")
    parser.add_argument("--gguf", help="the checkpoint converted to GGUF, for --llama-batched-bench")
    parser.add_argument("--csv", default="bench.csv",
                        help="the table; the decode-step table goes beside it as NAME-decode.csv "
                             "and llama.cpp's as NAME-llama.csv")
    parser.add_argument("--json", help="also write rows and provenance as JSON")
    return parser


def parse_args(argv=None) -> argparse.Namespace:
    """The arguments, each combination that cannot run refused with its reason."""
    parser = make_parser()
    args = parser.parse_args(argv)
    if args.make_checkpoint and not args.tokenizer:
        parser.error("--make-checkpoint needs --tokenizer")
    if not args.make_checkpoint and not args.checkpoint:
        parser.error("give --checkpoint (or --make-checkpoint)")
    unknown = set(args.strategies.split(",")) - set(STRATEGIES)
    if unknown:
        parser.error(f"unknown strategies {sorted(unknown)}; choose from {STRATEGIES}")
    if bool(args.llama_batched_bench) != bool(args.gguf):
        parser.error("--llama-batched-bench and --gguf go together")
    for name in ("llama_batched_bench", "gguf"):
        path = getattr(args, name)
        if path and not Path(path).is_file():
            parser.error(f"--{name.replace('_', '-')}: no such file: {path}")
    if args.samples < 1:
        parser.error(f"--samples must be >= 1, got {args.samples}")
    if args.answer_lengths:
        if args.no_eos:
            parser.error("--answer-lengths ends answers with the end token; drop --no-eos")
        try:
            low, high = map(int, args.answer_lengths.split(","))
        except ValueError:
            parser.error(f"--answer-lengths takes MIN,MAX, got {args.answer_lengths!r}")
        if not 1 <= low <= high:
            parser.error(f"--answer-lengths needs 1 <= MIN <= MAX, got {args.answer_lengths}")
        args.answer_lengths = (low, high)
    return args


def beside(csv: str, part: str) -> Path:
    """NAME-part.csv next to NAME.csv."""
    path = Path(csv)
    return path.with_name(f"{path.stem}-{part}{path.suffix}")


def llama_peer(args, table, steps, lengths, answer_lengths, peer_version) -> pd.DataFrame:
    """llama.cpp's llama-batched-bench on the same shape of work, beside our rows."""
    new_tokens = (sum(answer_lengths) / len(answer_lengths) if answer_lengths
                  else args.max_new_tokens)
    peer = llama_cpp.batched_bench(
        args.llama_batched_bench, args.gguf, prompt_tokens=round(sum(lengths) / len(lengths)),
        new_tokens=round(new_tokens), batch_sizes=[int(b) for b in args.batch_sizes.split(",")],
        threads=torch.get_num_threads())
    peer = llama_cpp.compare(table, steps, peer)
    print(f"\nllama.cpp ({peer_version}), llama-batched-bench "
          f"on {args.gguf}: batches of {peer.prompt_tokens.iloc[0]}-token prompts and "
          f"{peer.new_tokens.iloc[0]} new tokens each, decoded in lock step; ours: the decode "
          "step above and the best strategy's tokens/s on our prompts:")
    print(peer.drop(columns=["implementation"]).to_markdown(index=False, floatfmt=".3g"))
    return peer


def workload(args, tokenizer, vocab_size: int, device) -> tuple[list, list[int] | None]:
    """The prompts (each `--samples` times) and, with `--answer-lengths`, each answer's length."""
    prompts = load_prompts(args.prompts, args.n_prompts, tokenizer, args.prompt_style,
                           vocab_size, args.seed)
    prompts = [prompt for prompt in prompts for _ in range(args.samples)]
    lengths = [len(p) for p in prompts]
    print(f"{len(prompts)} prompts ({args.samples} per problem), {min(lengths)}-{max(lengths)} "
          f"tokens (mean {sum(lengths) / len(lengths):.0f}); {device_name(device)}", flush=True)
    answer_lengths = None
    if args.answer_lengths:
        answer_lengths = draw_answer_lengths(len(prompts), *args.answer_lengths, seed=args.seed)
        print(f"answers of {sum(answer_lengths)} tokens in all: {answer_lengths}", flush=True)
    return prompts, answer_lengths


def main(argv=None) -> pd.DataFrame | None:
    args = parse_args(argv)
    if args.cpu_class and args.cpu_class != current_cpu_class():
        # the kernels are chosen when torch loads: a fresh process, with the class's caps
        argv = sys.argv[1:] if argv is None else argv
        subprocess.run([sys.executable, "-m", "batched_reasoning.bench", *argv],
                       env=environment_for(args.cpu_class), check=True)
        return None if args.make_checkpoint else pd.read_csv(args.csv)
    library_hash = code_hash()  # of the code that runs, before anyone edits it
    if args.make_checkpoint:
        make_checkpoint(args.shape, args.tokenizer, args.make_checkpoint, args.seed)
        print(f"wrote {args.shape} checkpoint to {args.make_checkpoint}")
        return None
    device = resolve_device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    limits = measure_machine(device, resolve_dtype(args.dtype))
    print(f"machine: reads {limits.read_gb_s:.1f} GB/s, multiplies at "
          f"{limits.matmul_gflop_s:.0f} GFLOP/s ({limits.matmul_dtype})", flush=True)
    tokenizer = TextTokenizer.from_model_dir(args.checkpoint, args.prompt_style)
    model = load_model(args.checkpoint, dtype=args.dtype, device=device)
    prompts, answer_lengths = workload(args, tokenizer, model.cfg.vocab_size, device)
    lengths = [len(p) for p in prompts]
    table = benchmark(
        model, prompts, strategies=args.strategies.split(","),
        batch_sizes=[int(b) for b in args.batch_sizes.split(",")],
        max_new_tokens=args.max_new_tokens, book=args.book,
        transformers_model=load_transformers(args.checkpoint, args.dtype, device)
        if args.transformers else None,
        eos_token_id=None if args.no_eos else tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, answer_lengths=answer_lengths, compile=args.compile)
    table = table.assign(dtype=args.dtype, cpu_class=current_cpu_class(),
                         cpu_capability=torch.backends.cpu.get_cpu_capability())
    print(table.to_markdown(index=False, floatfmt=".3g"))
    if table.generated_tokens.nunique() > 1:
        print("note: the runs generated different numbers of tokens, so their work differs")
    context = args.decode_context or round(sum(lengths) / len(lengths))
    steps = pd.DataFrame(decode_table(model, [int(b) for b in args.batch_sizes.split(",")],
                                      context, args.dtype, args.compile))
    print(f"\nOne decode step at {context} cached positions (ms; pct_of_bound = the roofline "
          "bound, from the machine's limits measured right after the step, over the measured "
          "step; the kinds are from a profiled step):")
    print(steps.to_markdown(index=False, floatfmt=".3g"))
    peer = peer_version = None
    if args.llama_batched_bench:
        peer_version = llama_cpp.version(args.llama_batched_bench)
        peer = llama_peer(args, table, steps, lengths, answer_lengths, peer_version)
    Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.csv, index=False)
    steps.to_csv(beside(args.csv, "decode"), index=False)
    if peer is not None:
        peer.to_csv(beside(args.csv, "llama"), index=False)
    if args.json:
        write_json(provenance(args, device, library_hash, lengths, answer_lengths, limits)
                   | {"rows": table.to_dict(orient="records"),
                      "decode_steps": steps.to_dict(orient="records"),
                      "llama_cpp": None if peer is None else {
                          "version": peer_version, "rows": peer.to_dict(orient="records")}},
                   args.json)
    return table


def provenance(args, device, library_hash, lengths, answer_lengths, limits) -> dict:
    """What a bench run's JSON records besides its tables: arguments, machine, code, packages
    (the peers' too), kernel choices and the workload's lengths."""
    packages = package_versions()
    for name, used in (("transformers", args.transformers), ("reasoning-from-scratch", args.book)):
        if used:
            packages[name] = metadata.version(name)
    return {"args": vars(args), "device": device.type, "device_name": device_name(device),
            "cpu_class": current_cpu_class(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "kernel_choices": choices_made(),  # as timed on this machine (`calibration`)
            "code_hash": library_hash, "packages": packages,
            "prompt_lengths": lengths, "answer_lengths": answer_lengths,
            "machine": limits.as_dict()}


if __name__ == "__main__":
    main()
