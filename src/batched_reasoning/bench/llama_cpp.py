"""llama.cpp as a peer in the benchmark: its `llama-batched-bench` on a GGUF of the same weights.

`llama-batched-bench` times batches of `pl` sequences, each a prompt of `pp` random tokens
prefilled together, then `tg` tokens decoded in lock step (no sequence ends early). So its
figures are those of one uniform batch, not of our prompts with their own lengths: the
benchmark runs it with our mean prompt length and mean answer length, and compares its decode
rate with our decode step at the same batch size, which is like for like.

Both steps to get there are here too, from PyPI alone (the `llama-cpp-python` source
distribution vendors llama.cpp's sources and its converter):

    python -m batched_reasoning.bench.llama_cpp build ~/llama.cpp     # needs cmake and a C++ compiler
    python -m batched_reasoning.bench.llama_cpp convert CHECKPOINT model.gguf --llama-cpp ~/llama.cpp
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pandas as pd

# The source distribution whose vendor/llama.cpp we build (llama.cpp's own version is what
# `version()` reports).
SDIST = "llama-cpp-python==0.3.36"
TARGET = "llama-batched-bench"


def batched_bench(binary: str | Path, gguf: str | Path, prompt_tokens: int, new_tokens: int,
                  batch_sizes: list[int], threads: int) -> pd.DataFrame:
    """One row per batch size: llama.cpp's prefill and decode times and rates.

    The context holds every sequence of the largest batch in full, so no batch size is skipped.
    """
    batch_sizes = sorted(set(batch_sizes))
    context = max(batch_sizes) * (prompt_tokens + new_tokens)
    command = [str(binary), "-m", str(gguf), "-c", str(context),
               "-npp", str(prompt_tokens), "-ntg", str(new_tokens),
               "-npl", ",".join(map(str, batch_sizes)), "-t", str(threads),
               "--output-format", "jsonl"]
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-10:])
        raise RuntimeError(f"{binary} exited with status {proc.returncode} on {gguf}:\n{tail}")
    table = parse_jsonl(proc.stdout)
    missing = sorted(set(batch_sizes) - set(table.batch_size))
    if missing:
        raise RuntimeError(f"{binary} printed no result for batch size(s) {missing}")
    return table


def parse_jsonl(text: str) -> pd.DataFrame:
    """`llama-batched-bench --output-format jsonl` output (one object per line) as our columns."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("{"):
            continue
        run = json.loads(line)
        generated = run["pl"] * run["tg"]
        rows.append({
            "implementation": "llama.cpp", "batch_size": run["pl"], "prompt_tokens": run["pp"],
            "new_tokens": run["tg"], "threads": run["n_threads"], "generated_tokens": generated,
            "prefill_s": run["t_pp"], "decode_s": run["t_tg"], "wall_s": run["t"],
            "prefill_tokens_per_s": run["speed_pp"], "decode_tokens_per_s": run["speed_tg"],
            "tokens_per_s": generated / run["t"],
        })
    if not rows:
        raise RuntimeError(f"no results in llama-batched-bench's output:\n{text[-2000:]}")
    return pd.DataFrame(rows)


def version(binary: str | Path) -> str:
    """What `binary --version` says of its build, e.g. '0.5.0-dev (build 0, commit unknown)'
    (built outside a git checkout, as from the sdist, it knows no commit)."""
    proc = subprocess.run([str(binary), "--version"], capture_output=True, text=True)
    found = re.search(r"version: (.+)", proc.stdout + proc.stderr)
    return found.group(1).strip() if found else "unknown"


def compare(ours: pd.DataFrame, decode_steps: pd.DataFrame, peer: pd.DataFrame) -> pd.DataFrame:
    """`peer` with our figures beside it, per batch size: our profiled decode step's rate
    against llama.cpp's lock-step decode (like for like), and our best strategy's generated
    tokens/s on our prompts against llama.cpp's on its uniform batch (prefill included)."""
    ours = ours[ours.implementation == "ours"]
    decode = decode_steps.set_index("batch_size").decode_tokens_per_s
    rows = []
    for batch_size in peer.batch_size:
        same_batch = ours[ours.batch_size == batch_size]
        best = same_batch.loc[same_batch.tokens_per_s.idxmax()] if len(same_batch) else None
        rows.append({
            "batch_size": batch_size,
            "ours_decode_tokens_per_s": decode.get(batch_size, float("nan")),
            "ours_best_tokens_per_s": best.tokens_per_s if best is not None else float("nan"),
            "ours_best_strategy": best.strategy if best is not None else "",
        })
    table = peer.merge(pd.DataFrame(rows), on="batch_size")
    table["decode_ours_vs_llama"] = table.ours_decode_tokens_per_s / table.decode_tokens_per_s
    table["ours_vs_llama"] = table.ours_best_tokens_per_s / table.tokens_per_s
    return table


def binary_path(source: str | Path) -> Path:
    return Path(source) / "build" / "bin" / TARGET


def build(dest: str | Path) -> Path:
    """llama.cpp's sources from the `llama-cpp-python` sdist unpacked into `dest`, and its
    `llama-batched-bench` built there (native CPU flags); returns the binary.

    Once built, a rerun only checks; an interrupted one resumes where cmake stopped.
    """
    dest = Path(dest).expanduser()
    if not (dest / "CMakeLists.txt").is_file():
        unpack_sdist(dest)
    build_dir = dest / "build"
    subprocess.run(["cmake", "-S", str(dest), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                    "-DGGML_CCACHE=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
                    "-DLLAMA_BUILD_SERVER=OFF"], check=True)
    subprocess.run(["cmake", "--build", str(build_dir), "--target", TARGET,
                    "-j", str(os.cpu_count() or 1)], check=True)
    return binary_path(dest)


def unpack_sdist(dest: Path) -> None:
    """`dest` <- the sdist's vendor/llama.cpp, moved into place whole (never half unpacked)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--no-binary", ":all:", SDIST, "-d", tmp], check=True)
        archive = next(Path(tmp).glob("*.tar.gz"))
        prefix = f"{archive.name.removesuffix('.tar.gz')}/vendor/llama.cpp/"
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
            for member in members:
                member.name = member.name[len(prefix):]
            tar.extractall(Path(tmp) / "llama.cpp", members, filter="data")
        if dest.exists():
            shutil.rmtree(dest)  # an earlier unpack that never finished
        (Path(tmp) / "llama.cpp").rename(dest)


def convert(checkpoint: str | Path, out: str | Path, source: str | Path, outtype: str) -> Path:
    """Our checkpoint (a Hugging Face folder) as a GGUF file, by llama.cpp's own converter."""
    script = Path(source).expanduser() / "convert_hf_to_gguf.py"
    if not script.is_file():
        raise FileNotFoundError(f"{script} not found: give the folder `build` unpacked")
    subprocess.run([sys.executable, str(script), str(checkpoint), "--outtype", outtype,
                    "--outfile", str(out)], check=True)
    return Path(out)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m batched_reasoning.bench.llama_cpp",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    build_cmd = commands.add_parser("build", help=f"unpack llama.cpp and build {TARGET}")
    build_cmd.add_argument("dest", help="folder for llama.cpp's sources and build")
    convert_cmd = commands.add_parser("convert", help="a checkpoint as GGUF")
    convert_cmd.add_argument("checkpoint")
    convert_cmd.add_argument("out", help="the .gguf file to write")
    convert_cmd.add_argument("--llama-cpp", required=True, help="the folder `build` wrote")
    convert_cmd.add_argument("--outtype", default="bf16", choices=["f32", "f16", "bf16"])
    args = parser.parse_args(argv)
    if args.command == "build":
        print(build(args.dest))
    else:
        print(convert(args.checkpoint, args.out, args.llama_cpp, args.outtype))


if __name__ == "__main__":
    main()
