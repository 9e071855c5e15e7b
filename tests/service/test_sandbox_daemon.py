"""The daemon's side of the sandbox (issue 18): malformed bytes, and leftovers of a killed daemon."""

from __future__ import annotations

import os
import signal
import tempfile
import time

import grpc
import pytest

from evalfarm.sandbox import lifetime
from evalfarm.v1 import evalfarm_pb2 as pb
from tests.service.conftest import descendants, process_state, request, wait_until


@pytest.mark.parametrize("payload", [b"\xff\xff\xff\xff\x0f", b"\x0a\x80\x80\x80", b"\x12\x05abc"])
def test_undecodable_request_bytes_are_invalid_argument(daemon_factory, payload):
    d = daemon_factory()
    with grpc.insecure_channel(d.target) as ch:
        for method in ("/evalfarm.v1.EvalFarm/Score", "/evalfarm.v1.EvalFarm/Capacity"):
            call = ch.unary_unary(method, request_serializer=lambda b: b, response_deserializer=lambda b: b)
            with pytest.raises(grpc.RpcError) as err:
                call(payload, timeout=10)
            assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT, (method, err.value.details())
            assert "not a valid" in err.value.details()
        stream = ch.stream_stream("/evalfarm.v1.EvalFarm/ScoreStream", request_serializer=lambda b: b,
                                  response_deserializer=pb.ScoredSample.FromString)
        with pytest.raises(grpc.RpcError) as err:
            list(stream(iter([payload]), timeout=10))
        assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def _run_dirs() -> set[str]:
    found = set()
    for base in (tempfile.gettempdir(), "/dev/shm"):
        if os.path.isdir(base):
            found |= {os.path.join(base, n) for n in os.listdir(base) if n.startswith(lifetime.PREFIX + "eval")}
    return found


@pytest.mark.exclusive  # compares the temp root's run directories before and after
def test_daemon_sigkill_leaves_no_process_and_the_next_daemon_sweeps_its_files(spawn_daemon, data_dir):
    from evalfarm.v1 import evalfarm_pb2_grpc as pb_grpc

    before = _run_dirs()
    d = spawn_daemon("--warm-judges", "0")  # every process is the evaluation's (test_warm_judges: standbys)
    source = (data_dir / "cand_hang.py").read_text()
    ch = grpc.insecure_channel(f"127.0.0.1:{d.port}")
    req = request(source)
    req.task.source.source = (data_dir / "task_scale.py").read_bytes()
    req.task.source.name = "task_scale"
    fut = pb_grpc.EvalFarmStub(ch).Score.future(req)
    # Wait for the judge and its workers to be running.
    assert wait_until(lambda: len(descendants(d.pid)) >= 3, 60), descendants(d.pid)
    tree = descendants(d.pid)
    assert _run_dirs() - before
    os.kill(d.pid, signal.SIGKILL)
    d.proc.wait(10)

    def alive() -> list[int]:
        return [p for p in tree if process_state(p) not in (None, "Z")]

    assert wait_until(lambda: not alive(), 15), f"still running after the daemon's SIGKILL: {alive()}"
    fut.cancel()
    ch.close()
    left = _run_dirs() - before
    assert left, "expected the killed daemon's run directories to be there until a sweep"
    spawn_daemon()  # its start sweeps
    time.sleep(0.2)
    assert not (_run_dirs() - before) & left
