"""Choosing the daemon's GPUs. Discovery itself lives in evalfarm.devices (nvidia-smi,
CUDA_VISIBLE_DEVICES respected), shared with the scoring side so slot indices agree."""

from __future__ import annotations

import logging

from evalfarm.devices import cpu_name, gpu_names, gpu_uuids

__all__ = ["cpu_name", "gpu_names", "gpu_uuids", "nvml_missing", "parse_gpu_list"]

log = logging.getLogger(__name__)


def nvml_missing() -> str | None:
    """Why NVML cannot be used on this host (None when pynvml imports)."""
    try:
        import pynvml  # noqa: F401
    except ImportError:
        return ("pynvml is not installed: install the farm extra (pip install 'cuda-crl[farm]', "
                "which brings nvidia-ml-py); without it no score has a physical-floor check")
    return None


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
