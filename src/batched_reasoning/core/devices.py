"""Devices: resolving a config's device name, naming the hardware, waiting for queued work."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

import torch

from .allocation import slurm_allocation
from .cpu_class import current_cpu_class


def resolve_device(name: str) -> torch.device:
    """The torch device for `name`, or a clear error if this machine has none."""
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(
                "device 'cuda' was requested but this machine has no usable CUDA GPU "
                f"(torch {torch.__version__}, cuda build: {torch.version.cuda}); "
                "remove 'cuda' from the config's devices or run on a GPU node"
            )
        return torch.device("cuda")
    if name == "mps":
        if not torch.backends.mps.is_available():
            raise RuntimeError("device 'mps' was requested but this machine has no Apple MPS")
        return torch.device("mps")
    raise ValueError(f"unknown device {name!r}; choose cpu, cuda or mps")


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "mps":
        return "Apple MPS"
    return f"{cpu_model()} ({torch.get_num_threads()} threads)"


def cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what `platform` knows."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued kernels, so a clock read after this measures them."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def machine_record(device: torch.device) -> dict:
    """What a timing depends on besides the code: the processor (CPU model, or GPU name and
    memory), cores, threads, the software under the model, and under a scheduler whether the
    job had its node to itself."""
    record = {"cpu": cpu_model(), "cores": os.cpu_count(), "threads": torch.get_num_threads(),
              "torch": torch.__version__, "device": device.type, "device_name": device_name(device),
              "cuda": torch.version.cuda, "gpu_memory_gb": None, "driver": None,
              # the kernels' instruction set, where a run caps it to act out another CPU class
              "cpu_class": current_cpu_class(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
              "allocation": slurm_allocation()}
    if device.type == "cuda":
        record["gpu_memory_gb"] = round(torch.cuda.get_device_properties(device).total_memory
                                        / 2**30, 1)
        try:
            record["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=10).stdout.split("\n")[0].strip() or None
        except (OSError, subprocess.SubprocessError):
            pass
    return record
