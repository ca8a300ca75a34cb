"""Prove the CUDA path in one prepared command: a random Qwen3-0.6B-shaped checkpoint in
bfloat16, the CUDA-only tests, the benchmark against transformers at batch 1, 8 and 64, and
Appendix E's four workloads through the workflow at first-look scale, with a summary under
`--out`. A GPU is lent for minutes, offline, with only the working tree: every input is a file
given on the command line, and each part is a subprocess with its own log, so one failing part
does not hide the others. `--device cpu` runs the same parts on a tiny shape (CI does), so the
day a GPU comes finds no typo.

    python -m batched_reasoning.gpu_check --out gpu-check --tokenizer TOKENIZER --prompts MATH500
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pandas as pd
import yaml

from ..bench.cli import make_checkpoint
from ..core.io import write_json
from ..data.records import load_records

PARTS = ("checkpoint", "cuda_tests", "benchmark", "appendix_e")
WORKFLOW_FILES = ("Snakefile", "config.yaml", "workflow", "profiles", "configs")


@dataclasses.dataclass(frozen=True)
class Scale:
    """How much each part does: the GPU's work, or a CPU's rehearsal of the same steps."""

    shape: str
    dtype: str
    bench_prompts: int
    bench_batch_sizes: str
    bench_answer_lengths: str
    problems: int          # evaluated, and the timed ones
    max_new_tokens: int
    sampled_problems: int  # self-consistency's timed problems (3 samples each)


SCALES = {
    "cuda": Scale("qwen3-0.6b", "bfloat16", 64, "1,8,64", "16,32", 8, 32, 4),
    "cpu": Scale("tiny", "float32", 8, "1,8", "4,8", 4, 8, 2),
}


@dataclasses.dataclass
class Part:
    name: str
    status: str = "not run"  # passed, failed, skipped (cannot run here), not run
    seconds: float = 0.0
    detail: str = ""


def run_logged(cmd: list[str], log: Path, cwd: Path | None = None, timeout: float | None = None) -> int:
    """Run `cmd` with its output in `log`; its exit status (124 when it ran out of time)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        out.write(f"$ {' '.join(map(str, cmd))}\n")
        out.flush()
        try:
            return subprocess.run(list(map(str, cmd)), cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            out.write(f"\ntimed out after {timeout} s\n")
            return 124


def tail(log: Path, lines: int = 5) -> str:
    return " | ".join(log.read_text().strip().splitlines()[-lines:]) if log.is_file() else ""


# --- the parts ------------------------------------------------------------------------------

def build_checkpoint(args, scale: Scale, out: Path) -> str:
    make_checkpoint(scale.shape, args.tokenizer, out / "checkpoint", seed=0, dtype=scale.dtype)
    size = sum(f.stat().st_size for f in (out / "checkpoint").iterdir()) / 2**20
    return f"{scale.shape} random weights in {scale.dtype}, {size:.1f} MiB"


def cuda_tests(args, device: str, out: Path) -> tuple[str, str]:
    """The tests marked `cuda`; on a GPU every one must run and pass, on a CPU every one is
    collected and skipped (which proves they import and are selected)."""
    report = out / "cuda-tests.xml"
    code = run_logged([sys.executable, "-m", "pytest", "-q", "-m", "cuda", "-n0", "-p",
                       "no:cacheprovider", f"--junitxml={report}", args.tests],
                      out / "logs" / "cuda_tests.log", timeout=args.part_timeout)
    if not report.is_file():
        return "failed", f"pytest exited {code} without a report: {tail(out / 'logs' / 'cuda_tests.log')}"
    suite = ElementTree.parse(report).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}
    ran = counts["tests"] - counts["skipped"]
    detail = (f"{counts['tests']} collected, {ran} ran, {counts['failures'] + counts['errors']} "
              f"failed, {counts['skipped']} skipped")
    if counts["tests"] == 0 or counts["failures"] or counts["errors"] or code not in (0, 5):
        return "failed", detail
    if device == "cuda":
        return ("passed" if counts["skipped"] == 0 else "failed"), detail
    return ("skipped" if ran == 0 else "failed"), detail + " (no CUDA here)"


def benchmark(args, device: str, scale: Scale, out: Path) -> str:
    """Ours eager against transformers, then ours with `compile: auto` (CUDA graphs where
    the run is long enough), on the same weights and prompts."""
    common = [sys.executable, "-m", "batched_reasoning.bench", "--checkpoint", out / "checkpoint",
              "--prompts", args.prompts, "--n-prompts", str(scale.bench_prompts),
              "--batch-sizes", scale.bench_batch_sizes, "--strategies", "batched_stop",
              "--answer-lengths", scale.bench_answer_lengths, "--dtype", scale.dtype,
              "--device", device]
    runs = {"eager": ["--compile", "off", "--transformers"], "compiled": ["--compile", "auto"]}
    for name, extra in runs.items():
        code = run_logged([*common, *extra, "--csv", out / f"bench-{name}.csv",
                           "--json", out / f"bench-{name}.json"],
                          out / "logs" / f"benchmark-{name}.log", timeout=args.part_timeout)
        if code != 0:
            raise RuntimeError(f"benchmark ({name}) exited {code}: "
                               f"{tail(out / 'logs' / f'benchmark-{name}.log')}")
    rows = bench_rows(out)
    best = rows[rows.implementation == "ours"].groupby("batch_size").tokens_per_s.max()
    theirs = rows[rows.implementation == "transformers"].set_index("batch_size").tokens_per_s
    return "; ".join(f"batch {b}: ours {best[b]:.0f} tokens/s, {best[b] / theirs[b]:.2f}x transformers"
                     for b in best.index if b in theirs.index)


def bench_rows(out: Path) -> pd.DataFrame:
    """Both benchmark runs' rows, each with the `compile` setting it ran under."""
    runs = {"eager": "off", "compiled": "auto"}
    return pd.concat([pd.read_csv(out / f"bench-{name}.csv").assign(compile=setting)
                      for name, setting in runs.items() if (out / f"bench-{name}.csv").is_file()],
                     ignore_index=True)


def check_data(prompts: str, out: Path, needed: int) -> dict[str, Path]:
    """The workflow's inputs from the MATH-500 file alone: its first problems to evaluate, the
    rest as GRPO's training problems, and teacher traces made of their solutions."""
    records = load_records(prompts)
    if len(records) < 2 * needed:
        raise ValueError(f"{prompts}: {len(records)} problems; the GPU check needs {2 * needed}")
    data = out / "data"
    data.mkdir(parents=True, exist_ok=True)
    paths = {"test": data / "test.jsonl", "train": data / "train.jsonl",
             "teacher": data / "teacher.json"}
    test, train = records[:needed], records[needed:]
    paths["test"].write_text("".join(json.dumps(r) + "\n" for r in test))
    paths["train"].write_text("".join(json.dumps(r) + "\n" for r in train))
    paths["teacher"].write_text(json.dumps([
        {"problem": r["problem"], "gtruth_answer": r["answer"], "message_thinking": r["solution"],
         "message_content": f"The answer is $\\boxed{{{r['answer']}}}$."} for r in train]))
    return paths


def appendix_overlay(device: str, scale: Scale, checkpoint: Path, data: dict[str, Path]) -> dict:
    """Over configs/appendix-e.yaml and its first look: the check's checkpoint as both of the
    book's models, its data as a local dataset, every workload on `device`, answers short."""
    local = {"source": "local", "path": str(checkpoint.resolve())}
    short = {"max_new_tokens": scale.max_new_tokens, "devices": [device], "datasets": ["check"]}
    return {
        "results_dir": "results/gpu-check",
        "timing": {"minimum_repeats": 3, "maximum_repeats": 3},  # the fewest with an interval
        "models": {"check-base": local | {"prompt_style": "base"},
                   "check-reasoning": local | {"prompt_style": "reasoning"}},
        "datasets": {"check": {"source": "local", "path": str(data["test"].resolve()),
                               "train": {"path": str(data["train"].resolve())}}},
        "evaluate": short | {"models": ["check-reasoning"], "limit": scale.problems,
                             "timed_problems": scale.problems},
        "self_consistency": short | {"models": ["check-base"], "limit": scale.sampled_problems,
                                     "curve": {"models": ["check-base"],
                                               "problems": scale.sampled_problems}},
        "grpo": short | {"models": ["check-base"]},
        "distill": {"models": ["check-base"], "datasets": ["check"], "devices": [device],
                    "teacher": {"source": "local", "path": str(data["teacher"].resolve())}},
    }


def appendix_e(args, device: str, scale: Scale, out: Path) -> str:
    """The four workloads through the workflow, in a copy of it under `out`."""
    repo = Path(args.repo)
    run = out / "workflow"
    if run.exists():
        shutil.rmtree(run)
    run.mkdir(parents=True)
    for name in WORKFLOW_FILES:
        source = repo / name
        if not source.exists():
            raise FileNotFoundError(f"{source}: not found; run from the repository root or pass --repo")
        (shutil.copytree if source.is_dir() else shutil.copy2)(source, run / name)
    data = check_data(args.prompts, out, scale.problems)
    overlay = appendix_overlay(device, scale, out / "checkpoint", data)
    (run / "gpu-check.yaml").write_text(yaml.safe_dump(overlay, sort_keys=False))
    code = run_logged([sys.executable, "-m", "snakemake", "--cores", str(args.cores),
                       "--configfile", "configs/appendix-e.yaml",
                       "configs/appendix-e-first-look.yaml", "gpu-check.yaml"],
                      out / "logs" / "appendix_e.log", cwd=run, timeout=args.part_timeout)
    table = run / "results/gpu-check/tables/appendix_e.md"
    if code != 0 or not table.is_file():
        raise RuntimeError(f"the workflow exited {code}: {tail(out / 'logs' / 'appendix_e.log')}")
    shutil.copy2(table, out / "appendix_e.md")
    shutil.copy2(run / "results/gpu-check/tables/appendix_e.tsv", out / "appendix_e.tsv")
    rows = pd.read_csv(out / "appendix_e.tsv", sep="\t")
    batched = rows[rows["mode"] == "batched"]
    return "; ".join(f"{w} {s:.2f}x" for w, s in zip(batched.workload, batched.speedup))


# --- the command ----------------------------------------------------------------------------

def summary_markdown(parts: list[Part], device: str, scale: Scale, out: Path) -> str:
    benchmarked = out / "bench-eager.json"
    hardware = json.loads(benchmarked.read_text())["device_name"] if benchmarked.is_file() else device
    lines = [f"# GPU check on {hardware} ({scale.shape}, {scale.dtype})", "",
             "| part | status | seconds | detail |", "|---|---|---|---|"]
    lines += [f"| {p.name} | {p.status} | {p.seconds:.0f} | {p.detail} |" for p in parts]
    rows = bench_rows(out) if (out / "bench-eager.csv").is_file() else None
    if rows is not None:
        columns = ["implementation", "compile", "batch_size", "decode_mode", "tokens_per_s",
                   "peak_mem_mb", "ours_vs_transformers"]
        table = rows[columns].fillna({"decode_mode": "", "ours_vs_transformers": ""})
        table.loc[table.implementation != "ours", "compile"] = ""
        lines += ["", "## Benchmark", "", table.to_markdown(index=False, floatfmt=".4g")]
        steps = [step for name in ("eager", "compiled") if (out / f"bench-{name}.json").is_file()
                 for step in json.loads((out / f"bench-{name}.json").read_text())["decode_steps"]]
        if steps:
            lines += ["", "One decode step against its roofline bound (the machine's measured "
                      "read bandwidth and matrix rate):", "",
                      pd.DataFrame(steps)[["batch_size", "decode_mode", "step_ms", "bound_ms",
                                           "pct_of_bound", "read_gb_s"]
                                          ].to_markdown(index=False, floatfmt=".4g")]
    if (out / "appendix_e.md").is_file():
        lines += ["", (out / "appendix_e.md").read_text().replace("# ", "## ", 1)]
    return "\n".join(lines) + "\n"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m batched_reasoning.gpu_check",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder for the summary, tables and logs")
    parser.add_argument("--tokenizer", required=True, help="tokenizer.json (Qwen3's on a GPU)")
    parser.add_argument("--prompts", required=True, help="MATH-500-format JSON or JSONL")
    parser.add_argument("--device", choices=sorted(SCALES), default="cuda")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"comma-separated, in order, from {','.join(PARTS)} (later parts "
                             "reuse the checkpoint an earlier call built)")
    parser.add_argument("--tests", default="tests", help="the repository's tests folder")
    parser.add_argument("--repo", default=".", help="the repository root (for the workflow)")
    parser.add_argument("--cores", type=int, default=4, help="snakemake --cores for Appendix E")
    parser.add_argument("--part-timeout", type=float, default=600, help="seconds per subprocess")
    args = parser.parse_args(argv)
    chosen = [p for p in args.parts.split(",") if p]
    unknown = sorted(set(chosen) - set(PARTS))
    if unknown:
        parser.error(f"--parts: unknown {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    args.parts = chosen
    for name in ("tokenizer", "prompts"):
        if not Path(getattr(args, name)).is_file():
            parser.error(f"--{name} {getattr(args, name)}: no such file")
    return args


def main(argv=None) -> int:
    """Run the chosen parts; 0 only when none failed."""
    args = parse_args(argv)
    device, scale, out = args.device, SCALES[args.device], Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = {"checkpoint": lambda: build_checkpoint(args, scale, out),
            "cuda_tests": lambda: cuda_tests(args, device, out),
            "benchmark": lambda: benchmark(args, device, scale, out),
            "appendix_e": lambda: appendix_e(args, device, scale, out)}
    # a later call (the parts one at a time, under a per-command limit) adds to the summary
    earlier = (json.loads((out / "summary.json").read_text())["parts"]
               if (out / "summary.json").is_file() else [])
    parts = [Part(**p) for p in earlier if p["name"] not in args.parts]
    for name in args.parts:
        part, start = Part(name), time.perf_counter()
        print(f"[gpu_check] {name} ...", flush=True)
        try:
            if name != "checkpoint" and name != "cuda_tests" and not (out / "checkpoint").is_dir():
                raise FileNotFoundError(f"{out / 'checkpoint'}: none yet; run the checkpoint part first")
            result = work[name]()
            part.status, part.detail = result if isinstance(result, tuple) else ("passed", result)
        except Exception as error:  # noqa: BLE001 - the summary reports every part's failure
            part.status, part.detail = "failed", f"{type(error).__name__}: {error}"
        part.seconds = time.perf_counter() - start
        print(f"[gpu_check] {name}: {part.status} in {part.seconds:.0f} s: {part.detail}", flush=True)
        parts.append(part)
    parts.sort(key=lambda p: PARTS.index(p.name))
    write_json({"device": device, "scale": dataclasses.asdict(scale),
                "parts": [dataclasses.asdict(p) for p in parts]}, out / "summary.json")
    (out / "summary.md").write_text(summary_markdown(parts, device, scale, out))
    print(f"[gpu_check] summary: {out / 'summary.md'}")
    return 1 if any(p.status == "failed" for p in parts) else 0
