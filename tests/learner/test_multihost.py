"""Two CPU processes of one `jax.distributed` job on loopback (4 simulated devices each) train and
generate on one 8-device mesh, each from its own rows, and match a single-device run."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from loopback_job import free_port, process_env, run_job

WORKER = Path(__file__).with_name("multihost_worker.py")


def _single_device_reference() -> dict[str, object]:
    from multihost_worker import PROMPTS, global_rows, mh_cfg
    from scaling_worker import LOSS, _mesh, _state

    from learner.lm.sampler import Sampler, SamplingConfig
    from learner.lm.sharding import shard_batch
    from learner.runtime.train_step import train_step

    mesh = _mesh(1)
    state = _state(mesh, mh_cfg())
    batch = shard_batch(global_rows(), mesh)
    losses = []
    for _ in range(2):
        state, m = train_step(state, batch, LOSS, 2)
        losses.append(float(m["loss"]))
    checksum = float(sum((np.asarray(p, np.float64) ** 2).sum() for p in jax.tree.leaves(state.params)))
    res = Sampler(state.model, mesh=mesh).generate(
        PROMPTS, SamplingConfig(max_new_tokens=6, temperature=0.0), jax.random.PRNGKey(0))
    return {"losses": losses, "checksum": checksum, "tokens": res.tokens.tolist()}


@pytest.mark.long  # two JAX processes on loopback and a one-device run: about 85 s on 2 cores
def test_two_processes_on_loopback_match_one_device(tmp_path: Path) -> None:
    port = free_port()
    out = tmp_path / "result.json"
    base = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    run_job([sys.executable, str(WORKER), str(out)], [process_env(port, 2, pid, base) for pid in range(2)],
            timeout_s=900)
    got = json.loads(out.read_text())
    ref = _single_device_reference()
    np.testing.assert_allclose(got["losses"], ref["losses"], rtol=1e-5)
    np.testing.assert_allclose(got["checksum"], ref["checksum"], rtol=1e-5)
    assert got["tokens"] == ref["tokens"]
