"""Sharding rules, and sharded == single-device numerics on 8 simulated CPU devices."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from learner.lm.model import Transformer
from learner.lm.sharding import (
    DEFAULT_RULES,
    MeshConfig,
    MeshConfigError,
    create_sharded_model,
    fit_spec,
    init_placement,
    make_mesh,
    spec_for_path,
)
from tests.learner.tiny_setup import TINY_CFG

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
        np.asarray(jax.devices()[:1]).reshape(1, 1, 1), ("data", "fsdp", "tensor")
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


def test_init_placement_choices() -> None:
    mesh = make_mesh(MeshConfig())
    assert mesh.size == 1 and init_placement(mesh, 1 << 60) == "device"  # one device: op by op there
    assert init_placement(mesh, 1 << 20, "jit") == "jit"
    with pytest.raises(ValueError, match="auto, device, host, jit"):
        init_placement(mesh, 1, "gpu0")
    a = create_sharded_model(lambda: Transformer(TINY_CFG, rngs=nnx.Rngs(0)), mesh)
    b = create_sharded_model(lambda: Transformer(TINY_CFG, rngs=nnx.Rngs(0)), mesh, placement="jit")
    for x, y in zip(jax.tree.leaves(nnx.state(a)), jax.tree.leaves(nnx.state(b)), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-7)


def test_init_placement_across_processes_counts_one_host_copy_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Several processes build the weights on their hosts when every copy a host holds fits in half
    its memory (the whole-model jitted program took minutes to compile); else the jitted program."""
    from types import SimpleNamespace

    mesh = SimpleNamespace(size=2)  # init_placement reads only the mesh's size
    host_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    quarter = host_bytes // 4
    monkeypatch.setenv("LEARNER_PROCESSES_PER_HOST", "1")
    assert init_placement(mesh, quarter) == "host"
    monkeypatch.setenv("LEARNER_PROCESSES_PER_HOST", "4")  # four host copies of a quarter: jit
    assert init_placement(mesh, quarter) == "jit"
    monkeypatch.setenv("LEARNER_PROCESSES_PER_HOST", "none")
    with pytest.raises(ValueError, match="LEARNER_PROCESSES_PER_HOST"):
        init_placement(mesh, quarter)
