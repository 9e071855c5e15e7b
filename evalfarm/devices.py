"""What processors a host has: GPUs read through nvidia-smi (so the caller never initialises
CUDA), in the order CUDA_VISIBLE_DEVICES gives them, and the CPU model."""

from __future__ import annotations

import dataclasses
import functools
import os
import platform
import subprocess
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    compute_cap: str  # "9.0"

    @property
    def arch(self) -> str:
        major, minor = self.compute_cap.split(".")
        return f"sm_{major}{minor}"


@functools.cache
def list_gpus() -> tuple[GpuInfo, ...]:
    """GPUs visible to this process (CUDA_VISIBLE_DEVICES respected); empty without a driver."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,name,compute_cap", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    if out.returncode != 0:
        return ()
    gpus = []
    for line in out.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3:
            gpus.append(GpuInfo(int(parts[0]), parts[1], parts[2]))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() != "":
        order = [int(v) for v in visible.split(",") if v.strip().isdigit()]
        by_index = {g.index: g for g in gpus}
        gpus = [dataclasses.replace(by_index[i], index=k) for k, i in enumerate(order) if i in by_index]
    return tuple(gpus)


def gpu_names() -> list[str]:
    """Names of the visible GPUs in index order (the indices a ``cuda:N`` device uses)."""
    return [g.name for g in list_gpus()]


def cpu_name() -> str:
    """The CPU model, e.g. 'AMD EPYC 9454 48-Core Processor'."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def gpu_for(device: str) -> GpuInfo | None:
    if not device.startswith("cuda"):
        return None
    idx = int(device.split(":")[1]) if ":" in device else 0
    gpus = list_gpus()
    return gpus[idx] if idx < len(gpus) else None


def build_arch(device: str) -> str:
    """The target a candidate's extensions are built for: 'cpu' or the GPU's 'sm_XY'."""
    if not device.startswith("cuda"):
        return "cpu"
    gpu = gpu_for(device)
    if gpu is None:
        raise RuntimeError(f"no NVIDIA GPU for device {device!r} (nvidia-smi found none)")
    return gpu.arch
