"""A daemon with task windows (--task-window): a task's candidates go to the judge that already
made its set-up, each with fresh workers; other tasks get judges of their own."""

from __future__ import annotations

import urllib.request

import grpc
import pytest

from evalfarm.tasks import builtin_suite
from evalfarm.v1 import evalfarm_pb2 as pb
from evalfarm.v1 import evalfarm_pb2_grpc as pb_grpc

from .conftest import TINY, free_port, request


def _variant(task: str, kind: str) -> str:
    return next(v for v in builtin_suite().variants(task) if v.kind == kind and v.runs_on("cpu")).load().source


@pytest.mark.long  # a real daemon through four CPU evaluations: 25-45 s on 2 cores
def test_a_daemon_routes_a_task_s_candidates_to_its_window_judge(spawn_daemon):
    import json

    metrics_port = free_port()
    d = spawn_daemon("--slots", "1", "--task-window", "4", "--metrics-port", str(metrics_port))
    sources = [("L1/1", _variant("L1/1", "fast")), ("L1/1", _variant("L1/1", "wrong")),
               ("L1/2", _variant("L1/2", "wrong")), ("L1/1", _variant("L1/1", "fast") + "\n# again\n")]
    windows, verdicts = [], []
    with grpc.insecure_channel(d.target) as ch:
        stub = pb_grpc.EvalFarmStub(ch)
        for i, (task, src) in enumerate(sources):
            # No re-verification: an OK score above 3 would take a turn of the window (or, past
            # its end, a judge of its own) and move the indices this test reads.
            reply = stub.Score(request(src, f"s{i}", task=task, reverify_above=0.0, **TINY), timeout=240)
            verdicts.append(reply.verdict)
            windows.append(json.loads(reply.evidence_json)["evidence"].get("task_window", {}))
    assert verdicts == [pb.VERDICT_OK, pb.VERDICT_INCORRECT, pb.VERDICT_INCORRECT, pb.VERDICT_OK], verdicts
    # L1/1's three candidates in one window (L1/2 between them has its own judge, parked beside it).
    assert [w.get("index") for w in windows] == [1, 2, 1, 3], windows
    assert [w.get("shared_setup") for w in windows] == [False, True, False, True], windows
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    values = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith("evalfarm_judges_")}
    assert values['evalfarm_judges_taken_total{start="window"}'] >= 2, values
    assert values["evalfarm_judges_parked"] >= 1, values
