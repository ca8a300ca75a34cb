"""`batch_sizes: auto`: each device finds its best batch size for a stage by measuring it.

Appendix E's advice ("start with a smaller batch size and increase it until you reach the best
balance for your hardware and memory limits") as a procedure. Sizes 1, 2, 4, ... each run the
stage's own work (`autotune_trial`) in a fresh process, since CPU memory is not given back to
the system and a caught CUDA OOM leaves a fragmented cache. The probe stops

- at the memory budget: a size whose peak leaves less than `HEADROOM` of it free cannot be
  chosen, and larger ones only need more (the trap of a size chosen at the edge);
- at an out-of-memory error, or a trial the system killed;
- when two doublings in a row gain less than `GAIN` over the best size before them (a plateau,
  or a fall).

It then chooses the smallest size within `NEAR_BEST` of the best throughput whose peak leaves
`HEADROOM` free: past the knee, a larger batch costs memory and latency for almost nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import median

import psutil

from ..stages import autotune_trial

GAIN = 0.05  # two doublings in a row that gain less than this end the probe
NEAR_BEST = 0.95  # the choice: the smallest size within this share of the best throughput
HEADROOM = 0.15  # ... whose peak leaves this share of the budget free
MAX_SIZE = 1024
POLL_SECONDS = 0.01  # how often the parent reads a trial's memory


@dataclass
class Trial:
    """One batch size's measurement. `status`: ok, over budget, oom or failed."""

    batch_size: int
    status: str
    tokens_per_second: list[float] = field(default_factory=list)  # one per timed repeat
    interval: dict | None = None  # their median and 95% interval (`core.timing.Summary`)
    peak_memory_mb: float | None = None
    seconds: float = 0.0
    note: str = ""

    @property
    def median(self) -> float:
        return median(self.tokens_per_second) if self.tokens_per_second else 0.0

    @property
    def spread(self) -> float:
        """(slowest - fastest) / median of the repeats: how far one repeat could mislead."""
        if not self.tokens_per_second:
            return 0.0
        return (max(self.tokens_per_second) - min(self.tokens_per_second)) / self.median

    def record(self) -> dict:
        return asdict(self) | {"median_tokens_per_second": self.median, "spread": self.spread}


def usable(trial: Trial, budget_mb: float) -> bool:
    """A size that may be chosen: it ran, and its peak leaves `HEADROOM` of the budget free."""
    return (trial.status == "ok" and trial.peak_memory_mb is not None
            and trial.peak_memory_mb <= (1 - HEADROOM) * budget_mb)


def stop_reason(trials: list[Trial], budget_mb: float, cap: int) -> str | None:
    """Why the probe ends after `trials` (None: try the next doubling)."""
    last = trials[-1]
    if last.status != "ok":
        return f"batch size {last.batch_size}: {last.status}" + (f" ({last.note})" if last.note else "")
    if not usable(last, budget_mb):
        return (f"batch size {last.batch_size} peaked at {last.peak_memory_mb:.0f} MB, less than "
                f"{HEADROOM:.0%} under the {budget_mb:.0f} MB budget")
    if len(trials) >= 3:
        before = max(t.median for t in trials[:-2])
        if max(t.median for t in trials[-2:]) < (1 + GAIN) * before:
            return (f"batch sizes {trials[-2].batch_size} and {trials[-1].batch_size} gained less "
                    f"than {GAIN:.0%} over the best size before them")
    if last.batch_size * 2 > cap:
        return f"batch size {last.batch_size} is the largest the stage can fill (at most {cap})"
    return None


def choose(trials: list[Trial], budget_mb: float) -> tuple[int, str]:
    """The chosen size and why, from a finished probe's trials."""
    fits = [t for t in trials if usable(t, budget_mb)]
    if not fits:
        first = trials[0]
        raise ValueError(
            f"no batch size fits the {budget_mb:.0f} MB memory budget with {HEADROOM:.0%} "
            f"headroom: batch size 1 {first.status}"
            + (f", peak {first.peak_memory_mb:.0f} MB" if first.peak_memory_mb else "")
            + (f" ({first.note})" if first.note else "")
            + "; raise memory_budget_mb for this device or use a smaller model or dtype")
    best = max(fits, key=lambda t: t.median)
    chosen = min((t for t in fits if t.median >= NEAR_BEST * best.median),
                 key=lambda t: t.batch_size)
    why = (f"{chosen.median:.0f} tokens/s, within {NEAR_BEST:.0%} of the best "
           f"({best.median:.0f} at batch size {best.batch_size}), peak "
           f"{chosen.peak_memory_mb:.0f} MB of a {budget_mb:.0f} MB budget")
    unfit = [t for t in trials if not usable(t, budget_mb)]
    if unfit:
        why += f"; batch size {unfit[0].batch_size} did not fit ({unfit[0].status}"
        why += (f", peak {unfit[0].peak_memory_mb:.0f} MB)" if unfit[0].peak_memory_mb else ")")
    return chosen.batch_size, why


def run_probe(run_trial: Callable[[int], Trial], budget_mb: float, cap: int) -> dict:
    """Trials of sizes 1, 2, 4, ... (at most `cap` and MAX_SIZE) until `stop_reason`, and the
    choice."""
    cap = max(1, min(cap, MAX_SIZE))
    trials: list[Trial] = []
    size = 1
    while True:
        trials.append(run_trial(size))
        stopped = stop_reason(trials, budget_mb, cap)
        if stopped:
            break
        size *= 2
    chosen, why = choose(trials, budget_mb)
    return {"trials": [t.record() for t in trials], "stopped": stopped,
            "batch_size": chosen, "why": why}


# --- the memory a probe may use ---------------------------------------------------------------

def cgroup_free_mb() -> float | None:
    """What this process's cgroup (v2) still lets it use, if it sets a limit."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = Path("/sys/fs/cgroup/memory.current").read_text().strip()
    except OSError:
        return None
    return None if limit == "max" else (int(limit) - int(used)) / 2**20


def device_budget_mb(device: str, configured: float | None) -> tuple[float, str]:
    """The memory one job may use on `device` (MB) and where that figure comes from: the
    config's `memory_budget_mb`, else what the device has free now."""
    if configured is not None:
        return float(configured), f"memory_budget_mb.{device}"
    import torch

    if device == "cuda":
        free, _ = torch.cuda.mem_get_info()
        return free / 2**20, f"free memory of {torch.cuda.get_device_name()}"
    if device == "mps":
        return torch.mps.recommended_max_memory() / 2**20, "MPS recommended_max_memory"
    available = psutil.virtual_memory().available / 2**20
    cgroup = cgroup_free_mb()
    if cgroup is not None and cgroup < available:
        return cgroup, "the cgroup's memory limit less its usage"
    return available, "available system memory"


# --- one size in a fresh process ----------------------------------------------------------------

def tree_rss_mb(process: psutil.Process) -> float:
    """Resident memory of a process and its children (MiB)."""
    total = 0
    for p in [process, *process.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total / 2**20


def fresh_process_trial(spec: dict, budget_mb: float, device: str) -> Callable[[int], Trial]:
    """A `run_trial` that runs each size in its own Python process (`autotune_trial`).

    On CPU the parent watches the child's resident memory and stops it at the budget, before the
    kernel's OOM killer would stop something else; a child the system kills is an OOM too.
    """

    def run_trial(batch_size: int) -> Trial:
        with tempfile.TemporaryDirectory(prefix="autotune-") as tmp:
            spec_path, result_path = Path(tmp) / "spec.json", Path(tmp) / "trial.json"
            spec_path.write_text(json.dumps(spec))
            started = time.perf_counter()
            child = subprocess.Popen(
                [sys.executable, "-m", autotune_trial.__name__, str(spec_path),
                 str(batch_size), str(result_path)],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                env=os.environ | {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})
            watched, peak = psutil.Process(child.pid), 0.0
            while child.poll() is None:
                if device == "cpu":
                    peak = max(peak, tree_rss_mb(watched))
                    if peak > budget_mb:
                        child.kill()
                        child.wait()
                        return Trial(batch_size, "over budget", peak_memory_mb=peak,
                                     seconds=time.perf_counter() - started,
                                     note=f"stopped at {peak:.0f} MB")
                time.sleep(POLL_SECONDS)
            output = child.stdout.read()
            seconds = time.perf_counter() - started
            if child.returncode == -9:
                return Trial(batch_size, "oom", seconds=seconds,
                             note="killed by the system (SIGKILL), as its OOM killer does")
            if child.returncode != 0 or not result_path.exists():
                tail = " | ".join(output.strip().splitlines()[-3:])
                return Trial(batch_size, "failed", seconds=seconds,
                             note=f"exit status {child.returncode}: {tail}")
            result = json.loads(result_path.read_text())
            if device == "cpu" and result.get("peak_memory_mb") is not None:
                result["peak_memory_mb"] = max(result["peak_memory_mb"], peak)
            return Trial(batch_size=batch_size, seconds=seconds, **result)

    return run_trial


# --- a stage's probe ----------------------------------------------------------------------------

PROBE_STAGES = ("evaluate", "self_consistency", "grpo", "distill")


def longest_first(items: list, length, seed: int) -> list:
    """A fixed sample order: the longest item first (so every size holds it, and the peak
    memory is that of the stage's worst batch), the rest in a seeded shuffle."""
    import random

    longest = max(range(len(items)), key=lambda i: length(items[i]))
    rest = [item for i, item in enumerate(items) if i != longest]
    random.Random(seed).shuffle(rest)
    return [items[longest], *rest]


def stage_work(stage: str, model_dir: str, records_path: str, settings: dict,
               prompt_style: str, seed: int) -> tuple[dict, int]:
    """What one trial runs (the spec's stage part) and the largest batch the stage can fill."""
    from ..core.io import read_jsonl
    from ..data.prompts import TextTokenizer, format_prompt

    tokenizer = TextTokenizer.from_model_dir(model_dir, prompt_style)
    common = {"stage": stage, "pad_token_id": tokenizer.pad_token_id}
    if stage == "distill":
        from ..stages.distill import build_example
        from ..world.teacher import load_teacher_rows

        rows, _ = load_teacher_rows(records_path)
        examples = [build_example(r, tokenizer, prompt_style, settings["use_think_tokens"])
                    for r in rows]
        examples = [e for e in examples if len(e.ids) <= settings["max_seq_len"]]
        examples = longest_first(examples, lambda e: len(e.ids), seed)
        step = settings["examples_per_step"]
        return common | {"examples": [asdict(e) for e in examples[:step]],
                         "examples_per_step": step}, step
    records = read_jsonl(records_path)
    if stage == "grpo":
        records = records[:settings["train_problems"]]
        repeats, cap = settings["num_rollouts"], settings["problems_per_step"] * settings["num_rollouts"]
    elif stage == "self_consistency":
        records = records[:settings["limit"]]
        repeats, cap = settings["num_samples"], len(records) * settings["num_samples"]
    else:  # evaluation's batch sizes run its curve, timed on the first `timed_problems`
        records = records[:settings.get("limit")][:settings["timed_problems"]]
        repeats, cap = 1, len(records)
    prompts = [tokenizer.encode(format_prompt(r["problem"], prompt_style)
                                + settings.get("prompt_suffix", "")) for r in records]
    prompts = longest_first(prompts, len, seed)[:-(-min(cap, MAX_SIZE) // repeats)]
    sampled = stage != "evaluate"
    return common | {
        # a problem's samples (rollouts) sit next to each other, as the stage batches them
        "sequences": [p for p in prompts for _ in range(repeats)],
        "max_new_tokens": settings["max_new_tokens"],
        "sampler": ({"temperature": settings["temperature"], "top_p": settings["top_p"],
                     "seed": seed} if sampled and settings["temperature"] > 0 else None),
    }, cap


def probe(stage: str, model_dir: str, records_path: str, out_json: str, *, device: str,
          dtype: str, threads: int, prompt_style: str, settings: dict,
          memory_budget_mb: float | None, seed: int, params: dict, labels: dict,
          compile: str | None = "off", run_trial: Callable[[int], Trial] | None = None) -> dict:
    """Probe `stage`'s batch sizes on `device`; write every trial, the thresholds, the choice
    and the device's identity to `out_json`. `compile` is how a generating stage's decode
    steps run (`engine.compiled`), as in the runs the probe sizes."""
    import torch

    from ..core.devices import resolve_device
    from ..core.io import write_json
    from ..core.provenance import run_info

    if stage not in PROBE_STAGES:
        raise ValueError(f"autotune: unknown stage {stage!r}; choose one of {PROBE_STAGES}")
    torch_device = resolve_device(device)
    budget, budget_source = device_budget_mb(device, memory_budget_mb)
    work, cap = stage_work(stage, model_dir, records_path, settings, prompt_style, seed)
    spec = work | {"model_dir": str(model_dir), "device": device, "dtype": dtype,
                   "threads": threads, "compile": compile}
    result = run_probe(run_trial or fresh_process_trial(spec, budget, device), budget, cap)
    record = labels | result | {
        "stage": stage,
        "unit": "trained tokens/s" if stage == "distill" else "generated tokens/s",
        "budget_mb": budget, "budget_source": budget_source,
        "thresholds": {"gain": GAIN, "near_best": NEAR_BEST, "headroom": HEADROOM,
                       "repeats": asdict(autotune_trial.REPEATS), "max_size": MAX_SIZE,
                       "cap": cap},
        "gpu_memory_mb": (torch.cuda.get_device_properties(torch_device).total_memory / 2**20
                          if torch_device.type == "cuda" else None),
    } | run_info(params, torch_device, __name__)
    write_json(record, out_json)
    return record


def chosen_batch_size(path: str | Path) -> int:
    """The batch size a finished probe chose."""
    return int(json.loads(Path(path).read_text())["batch_size"])


def measured_peak_mb(path: str | Path, batch_size: int) -> float | None:
    """A probe's measured peak at `batch_size`, if it ran that size."""
    for trial in json.loads(Path(path).read_text())["trials"]:
        if trial["batch_size"] == batch_size and trial["peak_memory_mb"] is not None:
            return float(trial["peak_memory_mb"])
    return None
