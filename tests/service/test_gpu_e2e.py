"""The service end to end on a GPU host: one real daemon with the GPU slot, the real client and CLI.

Run on a CUDA host: ``pytest -m gpu tests/service/test_gpu_e2e.py -v``.
"""

from __future__ import annotations

import argparse
import json

import pytest

from evalfarm.client import FarmClient
from evalfarm.client.cli import run_remote_score, run_status
from evalfarm.tasks import builtin_suite
from evalfarm.verdict import Verdict

pytestmark = pytest.mark.gpu

OPTIONS = {"num_correctness_inputs": 100, "timing_budget_s": 2.0}
TASKS = ("L1/1", "L1/2", "L1/3", "L2/6")


def _variants() -> list[tuple[str, str, str, str]]:
    """(task, kind, label, source) for every shipped variant of TASKS that runs on CUDA."""
    out = []
    for task in TASKS:
        for v in builtin_suite().variants(task):
            if v.runs_on("cuda"):
                out.append((task, v.kind, v.label, v.path.read_text()))
    return out


def test_stream_through_a_gpu_daemon_then_cli(spawn_daemon, capsys) -> None:
    import torch

    d = spawn_daemon("--log-level", "WARNING", gpus="all", timeout=120)
    plan = {}
    variants = _variants()
    assert any("cuda" in label or "load_inline" in src for _, _, label, src in variants)
    with FarmClient([d.target], poll_interval_s=0.5, reverify=False) as farm:
        for i, (task, kind, label, src) in enumerate(variants * 2):  # each twice: the second is cached
            sid = farm.submit(task, src, f"g{i}", options=OPTIONS, deadline_s=900, tags={"kind": kind})
            plan[sid] = (task, kind, label)
        got = list(farm.results(timeout=900))
    assert sorted(r.sample_id for r in got) == sorted(plan)  # exactly one result per sample id
    gpu = torch.cuda.get_device_name(0)
    for r in got:
        task, kind, label = plan[r.sample_id]
        want = Verdict.OK if kind == "fast" else Verdict.INCORRECT
        assert r.verdict is want, (task, label, r.verdict, r.result.detail[:300])
        assert r.gpu_name == gpu and r.result.evidence.device.startswith("cuda")
        if kind == "fast":
            assert r.speedup > 1.0, (task, label, r.speedup)
    assert sum(r.cached or r.deduped for r in got) >= len(variants)

    task, kind, label, src = next(v for v in variants if v[1] == "fast")
    path = d.log_path.parent / "cand.py"
    path.write_text(src)
    rc = run_remote_score(argparse.Namespace(server=d.target, task=task, candidate=str(path), json=True,
                                             token_file=None, device="cuda", inputs=100, budget=2.0,
                                             tolerance=None, size_profile=None, timeout=600))
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and doc["verdict"] == "OK" and doc["gpu_name"] == gpu
    assert run_status(argparse.Namespace(server=d.target, json=True, token_file=None, timeout=30)) == 0
    status = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert status["slots"] == 1 and gpu in json.dumps(status)
