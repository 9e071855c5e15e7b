"""`learner.runtime.controller` across two real JAX processes on loopback (no model: ~10 s), and
its single-process identities."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from loopback_job import free_port, process_env, run_job

from learner.runtime import controller

WORKER = Path(__file__).with_name("controller_worker.py")


def test_one_process_runs_make_and_keeps_every_row() -> None:
    calls = []
    assert controller.share("x", lambda: calls.append(1) or 42) == 42 and calls == [1]
    batch = {"a": np.arange(6).reshape(3, 2)}
    assert controller.local_rows(batch) is batch
    np.testing.assert_array_equal(controller.gather_rows(batch["a"]), batch["a"])
    with pytest.raises(ValueError, match="process 0 failed"):
        controller.share("y", lambda: (_ for _ in ()).throw(ValueError("process 0 failed")))
    with pytest.raises(ValueError):
        controller.set_wait_timeout(0)


def test_two_processes_share_process_zeros_values_in_order(tmp_path: Path) -> None:
    port = free_port()
    envs = []
    for pid in range(2):
        env = process_env(port, 2, pid, {**os.environ, "JAX_PLATFORMS": "cpu"})
        env.pop("XLA_FLAGS", None)
        envs.append(env)
    run_job([sys.executable, str(WORKER), str(tmp_path / "seen")], envs, timeout_s=240)
    seen = [json.loads((tmp_path / f"seen{i}").read_text()) for i in range(2)]
    for i, s in enumerate(seen):
        assert s["small"] == {"from": 0, "rows": [3, 1, 2]}  # process 0's value everywhere
        assert s["big_ok"] is True
        assert s["error"] == "process 0 says no"
        assert s["calls_made"] == (2 if i == 0 else 0)
        assert s["gathered"] == [[0, 10], [20, 30], [40, 50], [60, 70]]  # process order
    assert seen[0]["local"] == [[0, 1], [2, 3]] and seen[1]["local"] == [[4, 5], [6, 7]]
    assert "expected 'name-b' from process 0 but got 'name-a'" in seen[1]["mismatch"]
    assert seen[0]["mismatch"] == "none"
