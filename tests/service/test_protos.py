"""The checked-in generated modules match the .proto (regenerate with scripts/gen_protos.sh)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GENERATED = ("evalfarm_pb2.py", "evalfarm_pb2_grpc.py", "evalfarm_pb2.pyi")


def test_generated_code_is_fresh(tmp_path: Path) -> None:
    # The interpreter running the tests (it has grpc_tools), whatever the checkout has as .venv.
    subprocess.run(["bash", str(REPO / "scripts" / "gen_protos.sh"), str(tmp_path)], check=True,
                   cwd=REPO, timeout=120, env={**os.environ, "PYTHON": sys.executable})
    stale = [
        name for name in GENERATED
        if (tmp_path / "evalfarm" / "v1" / name).read_bytes() != (REPO / "evalfarm" / "v1" / name).read_bytes()
    ]
    assert not stale, f"stale generated code {stale}: run scripts/gen_protos.sh and commit the result"


def test_service_shape() -> None:
    from evalfarm.v1 import evalfarm_pb2 as pb

    svc = pb.DESCRIPTOR.services_by_name["EvalFarm"]
    methods = {m.name: (m.client_streaming, m.server_streaming) for m in svc.methods}
    assert methods == {"Score": (False, False), "ScoreStream": (True, True), "Capacity": (False, False)}
    assert pb.Candidate.DESCRIPTOR.fields_by_name["source"].type == 12  # bytes: UTF-8 checked by us
    assert pb.ScoredSample.DESCRIPTOR.fields_by_name["speedup"].has_presence
