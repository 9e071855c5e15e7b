"""Data parallelism that scales: compiled per-device memory and FLOPs fall as 1/N on 8 simulated
CPU devices, and sharded (micro-batched) results equal single-device ones."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("scaling_worker.py")


def _run(mode: str) -> str:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    proc = subprocess.run([sys.executable, str(WORKER), mode], capture_output=True, text=True,
                          env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert proc.stdout.strip().endswith("OK")
    return proc.stdout


@pytest.mark.long  # compiles the model for 1, 2, 4 and 8 devices: about 70 s on 2 cores
def test_per_device_memory_and_flops_fall_as_one_over_n() -> None:
    line = next(x for x in _run("stats").splitlines() if x.startswith("STATS "))
    stats = json.loads(line[len("STATS "):])
    one, eight = stats["1"], stats["8"]
    for name in ("train", "decode"):
        for key in ("temp", "flops"):
            ratio = one[name][key] / eight[name][key]
            assert 8 / 1.15 <= ratio <= 8 * 1.15, (name, key, ratio, one[name], eight[name])
    # Micro-batching: the same step in less temporary memory, on one device and on eight.
    assert one["train_mb2"]["temp"] < 0.7 * one["train"]["temp"], one
    assert eight["train_mb2"]["temp"] < 0.85 * eight["train"]["temp"], eight


@pytest.mark.long  # compiles steps and generation on 8 simulated devices: about 60 s on 2 cores
def test_sharded_micro_batched_step_and_generation_equal_single_device() -> None:
    _run("equal")
