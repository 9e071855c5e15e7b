"""Static analysis runs out of the caller's process, bounded in time and memory (finding 9).

A pathological source (a long one that takes the rules past their time bound, deep nesting, a
huge string) gets a clear verdict within its bound through the Python API, the CLI and the
daemon, and the daemon's health keeps answering quickly meanwhile.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from evalfarm import ScoreConfig, Verdict
from evalfarm.guards import CandidateSyntaxError, GuardPolicy, bounded
from evalfarm.guards.bounded import StaticAnalysisUnavailable, StaticCheckPool
from evalfarm.scoring import as_candidate, as_task, score
from evalfarm.tasks.format import TaskFormatError
from evalfarm.v1 import evalfarm_pb2 as pb
from evalfarm.v1 import evalfarm_pb2_grpc as pb_grpc

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
BOUND_S = 2.0
# About 1 MiB (the daemon's default source limit) of statements: linear, but far more than 2 s of rules.
LONG = "import torch\n\nclass ModelNew(torch.nn.Module):\n    pass\n" + "x = 1\n" * 170_000
DEEP = "x = " + "(" * 100_000 + ")" * 100_000 + "\n"


@pytest.fixture
def pool():
    p = StaticCheckPool(size=1, timeout_s=BOUND_S)
    yield p
    p.close()


def _bounded_verdict(check) -> tuple[str, float]:
    t0 = time.monotonic()
    try:
        check()
    except (CandidateSyntaxError, StaticAnalysisUnavailable) as err:
        return f"{type(err).__name__}: {err}", time.monotonic() - t0
    return "findings", time.monotonic() - t0


def test_a_long_source_gets_a_verdict_within_the_bound_and_the_pool_recovers(pool):
    what, took = _bounded_verdict(lambda: pool.check(LONG, GuardPolicy()))
    assert took < BOUND_S + 3, took
    # Past the bound with the CPU to itself: the source's fault; starved of CPU: the farm's.
    assert what.startswith(("StaticAnalysisLimit", "StaticAnalysisUnavailable")), what
    assert "static analysis" in what
    findings = pool.check((DATA / "cand_fast.py").read_text(), GuardPolicy())  # a fresh child takes over
    assert findings == []


def test_deep_nesting_and_a_huge_string_get_a_verdict():
    # The property is the verdict, not the time: a bound a loaded machine cannot reach (the time
    # bound has its own test above).
    p = StaticCheckPool(size=1, timeout_s=30)
    try:
        with pytest.raises(CandidateSyntaxError, match="nested|parse"):
            p.check(DEEP, GuardPolicy())
        huge = "s = '" + "a" * (8 << 20) + "'\nimport socket\n"
        findings = p.check(huge, GuardPolicy())
    finally:
        p.close()
    assert [f.guard for f in findings] == ["network"] and findings[0].line == 2


def test_the_memory_bound_gives_a_verdict():
    p = StaticCheckPool(size=1, timeout_s=30, memory_bytes=300 << 20)
    try:
        what, _ = _bounded_verdict(lambda: p.check("x = 1\n" * 400_000, GuardPolicy()))
    finally:
        p.close()
    assert what.startswith("CandidateSyntaxError") and "memory" in what.lower(), what


def test_python_api_gives_a_compile_error_within_the_bound(monkeypatch):
    p = StaticCheckPool(size=1, timeout_s=BOUND_S)
    monkeypatch.setattr(bounded, "_default", p)
    try:
        t0 = time.monotonic()
        r = score(as_task(str(DATA / "task_scale.py")), as_candidate(LONG), ScoreConfig())
        took = time.monotonic() - t0
    finally:
        p.close()
    assert r.verdict in (Verdict.COMPILE_ERROR, Verdict.INFRA_ERROR), (r.verdict, r.detail)
    assert "static analysis" in r.detail and took < BOUND_S + 15, (r.detail, took)  # + start-up on a busy host
    # Too deep to parse: the candidate's own structure check says so before any analysis.
    with pytest.raises(TaskFormatError, match="nested"):
        as_candidate(DEEP + "class ModelNew: pass\n")


def test_cli_gives_a_verdict_within_the_bound(tmp_path):
    cand = tmp_path / "long.py"
    cand.write_text(LONG)
    env = dict(os.environ, PYTHONPATH=str(REPO), EVALFARM_STATIC_TIMEOUT_S=str(BOUND_S))
    out = subprocess.run([sys.executable, "-m", "evalfarm", "score", "--task", str(DATA / "task_scale.py"),
                          "--candidate", str(cand), "--device", "cpu", "--json"],
                         capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    result = json.loads(out.stdout)
    assert result["verdict"] in ("COMPILE_ERROR", "INFRA_ERROR"), result
    assert "static analysis" in result["detail"]


def _health_latency(target: str) -> float:
    with grpc.insecure_channel(target) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        stub.Check(health_pb2.HealthCheckRequest(), timeout=5)  # connect first
        t0 = time.perf_counter()
        assert stub.Check(health_pb2.HealthCheckRequest(), timeout=5).status == health_pb2.HealthCheckResponse.SERVING
        return time.perf_counter() - t0


def test_daemon_health_answers_while_a_pathological_source_is_analysed(spawn_daemon, monkeypatch):
    monkeypatch.setenv("EVALFARM_STATIC_TIMEOUT_S", str(BOUND_S))
    d = spawn_daemon()
    req = pb.ScoreRequest(task=pb.TaskRef(name="L1/1"),
                          candidate=pb.Candidate(source=LONG.encode(), sample_id="long"),
                          options=pb.ScoreOptions(num_correctness_inputs=20, timing_budget_s=0.5))
    reply: dict[str, object] = {}

    def call() -> None:
        with grpc.insecure_channel(d.target) as ch:
            reply["r"] = pb_grpc.EvalFarmStub(ch).Score(req, timeout=120)

    t0 = time.monotonic()
    caller = threading.Thread(target=call)
    caller.start()
    latencies = []
    while caller.is_alive():
        latencies.append(_health_latency(d.target))
        time.sleep(0.05)
    caller.join()
    took = time.monotonic() - t0
    r = reply["r"]
    assert r.verdict in (pb.VERDICT_COMPILE_ERROR, pb.VERDICT_INFRA_ERROR), r
    assert "static analysis" in r.detail, r.detail
    # Admission's build-ahead and the evaluation each analyse once: two bounds at most.
    assert took < 2 * BOUND_S + 10, took
    assert len(latencies) >= 5, latencies
    # A daemon blocked by the analysis would answer after it (seconds); a loaded machine adds tenths.
    assert max(latencies) < 0.5, latencies


def test_the_same_content_is_analysed_once_and_a_farm_failure_is_not_kept(monkeypatch):
    # A daemon checks a candidate when it admits it and again when its evaluation starts: the
    # second check is answered from the first's outcome, findings and parse errors alike.
    calls = []

    class CountingPool:
        def check(self, source, policy, reference_source=None):  # noqa: ANN001, ANN201
            calls.append(source)
            if source.startswith("unavailable"):
                raise bounded.StaticAnalysisUnavailable("the host was too busy to tell")
            return bounded.StaticCheckPool.check(real, source, policy, reference_source)

    real = StaticCheckPool(size=1, timeout_s=30)
    monkeypatch.setattr(bounded, "_default", CountingPool())
    monkeypatch.setattr(bounded, "OUTCOMES", bounded._Outcomes())
    try:
        net = "import socket\n"
        first = bounded.check_candidate_source(net, GuardPolicy())
        again = bounded.check_candidate_source(net, GuardPolicy())
        assert [f.guard for f in first] == [f.guard for f in again] == ["network"]
        assert first is not again  # each caller gets its own list
        assert len(calls) == 1 and bounded.OUTCOMES.hits == 1
        # Another policy or another reference is another analysis.
        bounded.check_candidate_source(net, GuardPolicy(allow_torch_ops=False))
        bounded.check_candidate_source(net, GuardPolicy(), reference_source="import socket\n")
        assert len(calls) == 3
        for _ in range(2):
            with pytest.raises(CandidateSyntaxError):
                bounded.check_candidate_source("def (:\n", GuardPolicy())
        assert len(calls) == 4
        for _ in range(2):
            with pytest.raises(bounded.StaticAnalysisUnavailable):
                bounded.check_candidate_source("unavailable = 1\n", GuardPolicy())
        assert len(calls) == 6  # the farm's failure is asked again
    finally:
        real.close()
