"""Memory-model benchmark: predicted vs measured peak memory of generation per batch size.

    python -m batched_reasoning.bench.memory --checkpoint ckpt/qwen3-0.6b-random \\
        --prompts math500_test.json --batch-sizes 1,4,8,16 --dtype float32 --threads 2 \\
        --csv memory.csv --json memory.json

Every batch size runs in a fresh process: on CPU the peak is the process's resident set size,
and one process keeps the pages of earlier, larger runs. Each process loads the checkpoint,
takes its baseline (RSS minus the weights) as a workflow job does, and runs `generate` on the
first `batch_size` prompts as one batch. The prediction (`memory_model.predict_peak_mb`) sees
only the model's config, the dtype, the batch size, the batch's longest prompt, the answer limit
and that baseline.
"""

from __future__ import annotations

import argparse
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd
import torch

from .cli import load_prompts
from ..model.checkpoint import load_model
from ..model.config import Qwen3Config
from ..core.devices import device_name, resolve_device
from ..engine.generation import STRATEGIES, generate
from ..core.io import write_json
from ..core.memory import PeakMemory
from ..engine.memory_model import baseline_mb, predict_peak_mb
from ..data.prompts import PROMPT_STYLES, TextTokenizer
from ..core.provenance import code_hash, package_versions


def measure(checkpoint: str, prompts: list[list[int]], *, strategy: str, dtype: str, device: str,
            threads: int | None, max_new_tokens: int, pad_token_id: int) -> dict:
    """Predicted and measured peak memory of generating for `prompts` as one batch (call it in
    a fresh process)."""
    torch_device = resolve_device(device)
    if threads:
        torch.set_num_threads(threads)
    model = load_model(checkpoint, dtype=dtype, device=torch_device)
    baseline = baseline_mb(model)
    model.pack_for_inference(len(prompts))
    with PeakMemory(torch_device) as memory:
        generate(model, prompts, strategy=strategy, batch_size=len(prompts),
                 max_new_tokens=max_new_tokens, eos_token_id=None, pad_token_id=pad_token_id)
    prompt_len = max(len(p) for p in prompts)
    predicted = predict_peak_mb(model.cfg, dtype, len(prompts), prompt_len, max_new_tokens,
                                torch_device.type, baseline, packed=model.packed)
    return {
        "batch_size": len(prompts), "prompt_len": prompt_len, "max_new_tokens": max_new_tokens,
        "baseline_mb": baseline,
        **{f"predicted_{part}_mb": mb for part, mb in predicted.items() if part != "total"},
        "predicted_mb": predicted["total"], "measured_mb": memory.peak_mb,
        "error": predicted["total"] / memory.peak_mb - 1,
    }


def measure_in_fresh_process(checkpoint: str, prompts: list[list[int]], **kwargs) -> dict:
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(measure, checkpoint, prompts, **kwargs).result()


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m batched_reasoning.bench.memory",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True,
                        help="model directory (config.json, tokenizer.json, safetensors)")
    parser.add_argument("--prompts", help="MATH-500-format JSON/JSONL (default: synthetic prompts)")
    parser.add_argument("--prompt-style", choices=PROMPT_STYLES, default="base")
    parser.add_argument("--batch-sizes", default="1,2,4,8,16")
    parser.add_argument("--strategy", choices=STRATEGIES, default="batched")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=0, help="synthetic prompts")
    parser.add_argument("--csv", default="memory.csv")
    parser.add_argument("--json", help="also write rows and provenance as JSON")
    return parser.parse_args(argv)


def main(argv=None) -> pd.DataFrame:
    args = parse_args(argv)
    library_hash = code_hash()  # of the code that runs, before anyone edits it
    device = resolve_device(args.device)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    tokenizer = TextTokenizer.from_model_dir(args.checkpoint, args.prompt_style)
    vocab_size = Qwen3Config.from_file(Path(args.checkpoint) / "config.json").vocab_size
    prompts = load_prompts(args.prompts, max(batch_sizes), tokenizer, args.prompt_style,
                           vocab_size, args.seed)
    rows = []
    for batch_size in batch_sizes:
        row = measure_in_fresh_process(
            args.checkpoint, prompts[:batch_size], strategy=args.strategy, dtype=args.dtype,
            device=args.device, threads=args.threads, max_new_tokens=args.max_new_tokens,
            pad_token_id=tokenizer.pad_token_id)
        rows.append({"dtype": args.dtype, "strategy": args.strategy} | row)
        print(f"bs={batch_size}: predicted {row['predicted_mb']:.0f} MB, measured "
              f"{row['measured_mb']:.0f} MB ({row['error']:+.1%})", flush=True)
    table = pd.DataFrame(rows)
    print(table.to_markdown(index=False, floatfmt=".4g"))
    Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.csv, index=False)
    if args.json:
        write_json({"args": vars(args), "device": device.type, "device_name": device_name(device),
                    "code_hash": library_hash, "packages": package_versions(),
                    "rows": table.to_dict(orient="records")}, args.json)
    return table


if __name__ == "__main__":
    main()
