"""Kernel choices measured on the machine that runs, once, and kept: FFTW's "wisdom".

Which kernel is fastest depends on the CPU: the bfloat16 attention kernel that is quick on a Xeon
with AMX took tens of ms for one decode query on an AMD Zen 5, where the same call in float32
took 2.5. Rather than constants tuned on one machine, a choice is timed the first time it is
needed, in milliseconds, and written to a wisdom file keyed by CPU model, CPU class
(`cpu_class`), threads and torch version, so later processes on that machine read it instead.
Every choice this process made is listed by `choices_made()`, and runs record them.

The choices: whether decode attention over a half-precision cache runs in float32
(`model.attention.decode_attention_in_float32`); from how many rows packed weights pay
(`model.kernels.pack_from_rows`); what one more prefill call costs (`call_cost`, for
`engine.generation.prefill_call_cost`); what compiling the decode step costs and saves
(`engine.compiled.compile_pays`, for `compile: auto`).

The wisdom file is `$BATCHED_REASONING_WISDOM`, else `batched_reasoning/wisdom.json` in the
user's cache folder (`$XDG_CACHE_HOME`, else `~/.cache`). Deleting it makes the next run measure
again; an unreadable one is measured over, with a warning.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

from .cpu_class import current_cpu_class
from .devices import cpu_model
from .io import write_json

WISDOM_ENV = "BATCHED_REASONING_WISDOM"
# A call whose time does not grow with its work measurably (a tiny model, a noisy machine) is
# priced this high: callers then never split work into more calls.
UNMEASURABLE_CALL_COST = 10**6
_made: dict[str, dict] = {}


def wisdom_path() -> Path:
    if os.environ.get(WISDOM_ENV):
        return Path(os.environ[WISDOM_ENV])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "batched_reasoning" / "wisdom.json"


def machine_key() -> str:
    """What a measurement holds for: this CPU, acted-out class, thread count and torch."""
    return (f"{cpu_model()} | class {current_cpu_class()} | {torch.get_num_threads()} threads | "
            f"torch {torch.__version__}")


def read_wisdom(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        wisdom = json.loads(path.read_text())
        if not isinstance(wisdom, dict):
            raise ValueError("not a JSON object")
        return wisdom
    except (OSError, ValueError) as error:
        print(f"calibration: ignoring unreadable wisdom file {path} ({error}); measuring again",
              file=sys.stderr, flush=True)
        return {}


def choose(name: str, measure) -> dict:
    """The recorded choice `name` for this machine, or `measure()`'s (a dict with a `choice`),
    then written to the wisdom file. A read-only cache folder only costs measuring again."""
    if name in _made:
        return _made[name]
    path, key = wisdom_path(), machine_key()
    known = read_wisdom(path).get(key, {}).get(name)
    if not (isinstance(known, dict) and "choice" in known):
        known = measure()
        wisdom = read_wisdom(path)  # again: another process may have added to it meanwhile
        wisdom.setdefault(key, {})[name] = known
        try:
            write_json(wisdom, path)
        except OSError as error:
            print(f"calibration: cannot keep wisdom in {path} ({error})", file=sys.stderr,
                  flush=True)
    _made[name] = known
    return known


def choices_made() -> dict[str, object]:
    """Every choice this process has made so far: name -> choice."""
    return {name: record["choice"] for name, record in sorted(_made.items())}


def median_ms(calls: dict, repeats: int = 15) -> dict[str, float]:
    """Each call's median time in ms. The calls take turns, so a machine busy with other jobs
    slows them alike and the comparison stays fair."""
    times = {name: [] for name in calls}
    for call in calls.values():
        call()  # warm-up: first calls pay for allocation and dispatch
    for _ in range(repeats):
        for name, call in calls.items():
            tick = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - tick)
    return {name: sorted(t)[repeats // 2] * 1000 for name, t in times.items()}


def call_cost(name: str, prepare, small: int, large: int, repeats: int = 7) -> int:
    """What one call of `call(size)` costs beyond its work, in units of its work (prompt
    tokens, key positions): the fixed time over the time per unit, from the median times at
    `small` and `large` sizes. `prepare()` makes `call` (and its inputs) only when a
    measurement is needed. Timed once per machine; the record keeps both times."""

    def measure() -> dict:
        call = prepare()
        ms = median_ms({"small": lambda: call(small), "large": lambda: call(large)}, repeats)
        per_unit = (ms["large"] - ms["small"]) / (large - small)
        fixed = ms["small"] - per_unit * small
        cost = (UNMEASURABLE_CALL_COST if per_unit <= 0
                else min(UNMEASURABLE_CALL_COST, max(0, round(fixed / per_unit))))
        return {"choice": cost, "sizes": [small, large],
                "small_ms": round(ms["small"], 4), "large_ms": round(ms["large"], 4)}

    return choose(name, measure)["choice"]
