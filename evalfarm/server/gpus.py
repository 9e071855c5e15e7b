"""GPU discovery without initialising CUDA in the daemon (nvidia-smi or pynvml)."""

from __future__ import annotations

import logging
import platform
import shutil
import subprocess
from pathlib import Path

log = logging.getLogger(__name__)


def gpu_names() -> list[str]:
    """Names of the visible NVIDIA GPUs in index order; [] when there are none."""
    names = _nvml_names()
    if names is not None:
        return names
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError) as err:
        log.warning("event=nvidia_smi_failed error=%r", err)
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def _nvml_names() -> list[str] | None:
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver: fall back to nvidia-smi
        return None
    try:
        names = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
            names.append(name.decode() if isinstance(name, bytes) else str(name))
        return names
    finally:
        pynvml.nvmlShutdown()


def parse_gpu_list(spec: str, available: list[str]) -> list[int]:
    """'all' or a comma list like '0,1' -> GPU indices (checked against what is visible)."""
    if spec == "all":
        if not available:
            raise ValueError("--gpus all: no NVIDIA GPU found (nvidia-smi lists none)")
        return list(range(len(available)))
    try:
        idx = [int(p) for p in spec.split(",") if p.strip()]
    except ValueError:
        raise ValueError(f"--gpus must be 'all' or a list like 0,1; got {spec!r}") from None
    if not idx or len(set(idx)) != len(idx) or min(idx) < 0:
        raise ValueError(f"--gpus must list distinct GPU indices; got {spec!r}")
    bad = [i for i in idx if i >= len(available)]
    if bad:
        raise ValueError(f"--gpus: no GPU {bad[0]} (found {len(available)})")
    return idx


def cpu_name() -> str:
    """The CPU model (part of the result-cache key in CPU mode)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"
