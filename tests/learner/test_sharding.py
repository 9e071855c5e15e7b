"""Sharding rules, and sharded == single-device numerics on 8 simulated CPU devices."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jax
import pytest
from jax.sharding import PartitionSpec as P

from learner.lm.sharding import DEFAULT_RULES, MeshConfig, MeshConfigError, fit_spec, spec_for_path

WORKER = Path(__file__).with_name("multidevice_worker.py")


def test_mesh_config_resolution() -> None:
    assert MeshConfig(data=2, fsdp=-1, tensor=2).resolve(8) == (2, 2, 2)
    assert MeshConfig().resolve(1) == (1, 1, 1)
    with pytest.raises(MeshConfigError):
        MeshConfig(data=3, fsdp=-1).resolve(8)
    with pytest.raises(MeshConfigError):
        MeshConfig(data=-1, fsdp=-1).resolve(8)


def test_rules_by_path_and_fit() -> None:
    mesh = jax.sharding.Mesh(
        __import__("numpy").asarray(jax.devices()[:1]).reshape(1, 1, 1), ("data", "fsdp", "tensor")
    )
    assert spec_for_path("layers/3/self_attn/q_proj/kernel", (8, 8), mesh, DEFAULT_RULES) == P("fsdp", "tensor")
    assert spec_for_path("layers/3/mlp/down_proj/kernel", (8, 8), mesh, DEFAULT_RULES) == P("tensor", "fsdp")
    assert spec_for_path("0/mu/layers/0/mlp/up_proj/kernel", (8, 8), mesh, DEFAULT_RULES) == P("fsdp", "tensor")
    assert spec_for_path("norm/scale", (8,), mesh, DEFAULT_RULES) == P()
    assert spec_for_path("0/count", (), mesh, DEFAULT_RULES) == P()


def test_fit_spec_drops_non_dividing_axes() -> None:
    class FakeMesh:
        shape = {"data": 1, "fsdp": 4, "tensor": 2}

    assert fit_spec(P("fsdp", "tensor"), (6, 4), FakeMesh()) == P(None, "tensor")  # type: ignore[arg-type]
    assert fit_spec(P(("data", "fsdp")), (8,), FakeMesh()) == P(("data", "fsdp"))  # type: ignore[arg-type]


def test_sharded_forward_backward_and_cross_mesh_restore(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
    }
    proc = subprocess.run(
        [sys.executable, str(WORKER), str(tmp_path / "ckpt")],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert proc.stdout.strip().endswith("OK")
