"""The farm's front door as a kernel engineer and an operator meet it: a remote score says what a
local one says, the listening line names every port, a bad request is logged once with its
reason, and a draining daemon is called draining, not unreachable."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import urllib.request

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from evalfarm.cli import main
from evalfarm.server.cli import listening_line, listening_port
from tests.sandbox_under_test import DAEMON_ARGS
from tests.service.conftest import REPO, fake_source, kill_tree, request

TASK = "L1/2"


def _score(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "evalfarm", "score", *argv], env=env, capture_output=True,
                          text=True, timeout=300)


def test_an_empty_file_gets_the_same_verdict_and_exit_code_locally_and_on_a_daemon(spawn_daemon, tmp_path):
    empty = tmp_path / "empty.py"
    empty.write_text("")
    blank = tmp_path / "blank.py"
    blank.write_text("\n   \n")
    d = spawn_daemon()
    for cand in (empty, blank):
        local = _score("--task", TASK, "--candidate", str(cand), "--json", "--cache-dir", str(tmp_path / "c"))
        remote = _score("--task", TASK, "--candidate", str(cand), "--json", "--server", d.target)
        assert (local.returncode, remote.returncode) == (0, 0), (local.stderr, remote.stderr)
        got = [json.loads(p.stdout) for p in (local, remote)]
        assert [g["verdict"] for g in got] == ["LOAD_ERROR", "LOAD_ERROR"]
        assert got[0]["detail"] == got[1]["detail"] == "the candidate is empty: it defines no class ModelNew"
    # --fail-on means the same both ways: the verdict named makes the exit code 1.
    local = _score("--task", TASK, "--candidate", str(empty), "--json", "--cache-dir", str(tmp_path / "c"),
                   "--fail-on", "LOAD_ERROR")
    remote = _score("--task", TASK, "--candidate", str(empty), "--json", "--server", d.target, "--fail-on", "LOAD_ERROR")
    assert (local.returncode, remote.returncode) == (1, 1), (local.stderr, remote.stderr)


def test_a_draining_daemon_is_said_to_be_draining_not_unreachable(daemon_factory, tmp_path, capsys):
    d = daemon_factory()
    d.daemon.service.slots.draining = True
    cand = tmp_path / "c.py"
    cand.write_text(fake_source())
    assert main(["score", "--task", "L1/1", "--candidate", str(cand), "--server", d.target]) == 2
    err = capsys.readouterr().err
    assert f"the evalfarm daemon at {d.target} is draining" in err, err
    assert "cannot reach" not in err


def test_an_invalid_request_is_logged_once_with_its_reason(daemon_factory, caplog):
    d = daemon_factory()
    ch, stub = d.stub()
    caplog.set_level(logging.INFO, logger="evalfarm")
    with ch:
        with pytest.raises(grpc.RpcError) as err:
            stub.Score(request(fake_source(), "bad-1", task="L9/999"), timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        replies = list(stub.ScoreStream(iter([request(fake_source(), "bad-2", task="L9/998")]), timeout=10))
        assert replies[0].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    logged = [r.getMessage() for r in caplog.records if "invalid_request" in r.getMessage()]
    assert len(logged) == 2, logged  # once per request, whichever RPC carried it
    assert "sample_id=bad-1" in logged[0] and "unknown task" in logged[0]
    assert "sample_id=bad-2" in logged[1] and "L9/998" in logged[1]
    assert all(r.levelno == logging.WARNING for r in caplog.records if "invalid_request" in r.getMessage())


def test_the_listening_line_round_trips_with_and_without_the_extra_ports():
    line = listening_line("::1", 50051, "127.0.0.1:9100", "127.0.0.1:50052")
    assert listening_port(line) == 50051
    assert "metrics http://127.0.0.1:9100/metrics" in line and "health 127.0.0.1:50052" in line
    bare = listening_line("127.0.0.1", 7, None, None)
    assert listening_port(bare) == 7 and "metrics off (--metrics-port)" in bare
    assert listening_port("some log line listening on x:1") is None


def test_serve_names_its_metrics_and_health_ports_when_it_listens(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "evalfarm", "serve", "--device", "cpu", "--port", "0",
                             "--metrics-port", "0", "--health-port", "0", "--cache-dir", str(tmp_path / "cache"),
                             *DAEMON_ARGS],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert listening_port(line) is not None, line
        metrics = line.split("metrics http://", 1)[1].split("/metrics", 1)[0]
        health = line.rsplit("health ", 1)[1].strip()
        with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10) as reply:
            assert b"evalfarm" in reply.read()
        with grpc.insecure_channel(health) as ch:
            status = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert status.status == health_pb2.HealthCheckResponse.SERVING
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            kill_tree(proc.pid)
            proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()

