"""ScoreOptions.require_other_sizes through a real daemon on CPU."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest

from evalfarm.v1 import evalfarm_pb2 as pb
from evalfarm.v1 import evalfarm_pb2_grpc as pb_grpc

DATA = Path(__file__).resolve().parent.parent / "data"


@pytest.mark.slow
def test_daemon_requires_other_sizes(spawn_daemon) -> None:
    d = spawn_daemon("--slots", "1")
    req = pb.ScoreRequest(
        task=pb.TaskRef(source=pb.TaskSource(source=(DATA / "task_sized.py").read_bytes(), name="task_sized")),
        candidate=pb.Candidate(source=(DATA / "cand_sized_hardcoded.py").read_bytes(), sample_id="hard"),
        options=pb.ScoreOptions(num_correctness_inputs=10, timing_budget_s=0.3, require_other_sizes=True))
    with grpc.insecure_channel(d.target) as ch:
        out = pb_grpc.EvalFarmStub(ch).Score(req, timeout=240)
    assert out.verdict == pb.VERDICT_INCORRECT, out.detail
    assert out.detail.startswith("other sizes (required):")
    other = json.loads(out.evidence_json)["evidence"]["other_sizes"]
    assert other["profile"] == "default" and other["status"] == "failed"
