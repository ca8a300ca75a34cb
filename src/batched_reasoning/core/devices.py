"""Devices: resolving a config's device name, naming the hardware, waiting for queued work."""

from __future__ import annotations

import platform
from pathlib import Path

import torch


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
