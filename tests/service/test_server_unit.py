"""Daemon behaviour with a fake scoring backend: admission, deadlines, streams, auth, drain."""

from __future__ import annotations

import concurrent.futures
import threading
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from evalfarm.server.config import ServerConfig, ServerConfigError, is_loopback
from evalfarm.v1 import evalfarm_pb2 as pb
from evalfarm.v1 import evalfarm_pb2_grpc as pb_grpc

from .conftest import FakeBackend, fake_source, request, wait_until

TOKEN = "s3cret-token-0123456789"


def test_score_and_cache(daemon_factory) -> None:
    d = daemon_factory()
    ch, stub = d.stub()
    with ch:
        first = stub.Score(request(fake_source(speedup=2.5, sleep=0.1), "a"), timeout=10)
        assert first.verdict == pb.VERDICT_OK and first.speedup == 2.5 and first.sample_id == "a"
        assert not first.evidence.cached and first.host == "fake-host" and first.gpu_name == "cpu"
        assert '"verdict": "OK"' in first.evidence_json
        again = stub.Score(request(fake_source(speedup=2.5, sleep=0.1), "b"), timeout=10)
        assert again.evidence.cached and again.sample_id == "b" and again.speedup == 2.5
        assert d.backend.started == 1
        # different options -> a different cache key
        stub.Score(request(fake_source(speedup=2.5, sleep=0.1), "c", num_correctness_inputs=7), timeout=10)
        assert d.backend.started == 2
        # no_cache forces a fresh evaluation
        req = request(fake_source(speedup=2.5, sleep=0.1), "d")
        req.no_cache = True
        stub.Score(req, timeout=10)
        assert d.backend.started == 3


def test_infra_error_not_cached(daemon_factory) -> None:
    d = daemon_factory()
    ch, stub = d.stub()
    with ch:
        for _ in range(2):
            r = stub.Score(request(fake_source("INFRA_ERROR", None)), timeout=10)
            assert r.verdict == pb.VERDICT_INFRA_ERROR and not r.evidence.cached
        assert d.backend.started == 2


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda r: setattr(r.candidate, "source", b"x" * 2000), "limit is 1000"),
        (lambda r: setattr(r.candidate, "source", b"class ModelNew:\n  s='\xff\xfe'\n"), "not valid UTF-8"),
        (lambda r: setattr(r.task, "name", "L9/999"), "unknown task"),
        (lambda r: r.ClearField("task"), "task is missing"),
        (lambda r: r.ClearField("candidate"), "candidate is missing"),
        (lambda r: setattr(r.options, "num_correctness_inputs", 0), "num_correctness_inputs"),
        (lambda r: setattr(r.options, "tolerance", "loose"), "tolerance"),
        (lambda r: setattr(r.options, "precision", "fp32"), "precision must be 'fp64' or 'tolerance'"),
        (lambda r: setattr(r.options, "timing_protocol", "batched"), "timing_protocol must be 'blocks' or 'lone'"),
    ],
)
def test_bad_input_is_invalid_argument(daemon_factory, mutate, message) -> None:
    d = daemon_factory(max_source_bytes=1000)
    ch, stub = d.stub()
    req = request(fake_source())
    mutate(req)
    with ch, pytest.raises(grpc.RpcError) as err:
        stub.Score(req, timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in err.value.details()
    assert d.backend.started == 0


@pytest.mark.parametrize("source", [b"def f(:\n", b"class Other: pass\n", b"", b" \n\t\n"])
def test_broken_candidate_is_scored_not_rejected(daemon_factory, source) -> None:
    """A syntax error, a missing ModelNew or an empty source is the candidate's failure (a verdict, as
    a local score gives), never INVALID_ARGUMENT."""
    d = daemon_factory()
    ch, stub = d.stub()
    req = request(fake_source())
    req.candidate.source = source
    with ch:
        stub.Score(req, timeout=10)
    assert d.backend.started == 1


def test_over_capacity_is_rejected_fast(daemon_factory) -> None:
    d = daemon_factory(queue_limit=2)
    ch, stub = d.stub()
    with ch, concurrent.futures.ThreadPoolExecutor(8) as pool:
        futs = [pool.submit(stub.Score, request(fake_source(sleep=1.0, salt=str(i)), f"s{i}"), timeout=20)
                for i in range(3)]  # 1 running + 2 queued
        assert wait_until(lambda: d.daemon.service.slots.queue_depth == 2, 5)
        t0 = time.monotonic()
        with pytest.raises(grpc.RpcError) as err:
            stub.Score(request(fake_source(sleep=1.0, salt="x"), "x"), timeout=10)
        elapsed = time.monotonic() - t0
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        # Refused at admission, not queued: a queued request would wait for the running 1 s
        # candidate and the two ahead of it (3 s or more); the bound leaves room for a loaded machine.
        assert elapsed < 2.5, elapsed
        assert [f.result(20).verdict for f in futs] == [pb.VERDICT_OK] * 3


def test_deadline_in_queue_and_running_frees_slot(daemon_factory) -> None:
    d = daemon_factory(queue_limit=4)
    ch, stub = d.stub()
    with ch, concurrent.futures.ThreadPoolExecutor(4) as pool:
        long = pool.submit(stub.Score, request(fake_source(sleep=30, salt="long"), "long"), timeout=0.6)
        assert wait_until(lambda: d.daemon.service.slots.running == 1, 5)
        queued = pool.submit(stub.Score, request(fake_source(sleep=30, salt="q"), "q"), timeout=0.3)
        for fut in (long, queued):
            # Either gRPC's deadline or the daemon's own (a hair earlier) answers first.
            try:
                reply = fut.result(10)
            except grpc.RpcError as err:
                assert err.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            else:
                assert reply.verdict == pb.VERDICT_INFRA_ERROR and "deadline exceeded" in reply.detail
        # the running evaluation was cancelled and its slot came back; the queued one never started
        assert wait_until(lambda: d.daemon.service.slots.free == 1, 5)
        assert d.backend.started == 1 and d.backend.evaluations[-1].cancelled
        assert d.daemon.service.slots.queue_depth == 0
        ok = stub.Score(request(fake_source(sleep=0.05, salt="after"), "after"), timeout=5)
        assert ok.verdict == pb.VERDICT_OK


def test_client_cancel_kills_evaluation(daemon_factory) -> None:
    d = daemon_factory()
    ch, stub = d.stub()
    with ch:
        call = stub.Score.future(request(fake_source(sleep=30, salt="c"), "c"), timeout=30)
        assert wait_until(lambda: d.backend.started == 1, 5)
        call.cancel()
        assert wait_until(lambda: d.backend.evaluations[-1].cancelled, 5)
        assert wait_until(lambda: d.daemon.service.slots.free == 1, 5)


def test_stream_out_of_order_and_per_item_errors(daemon_factory) -> None:
    d = daemon_factory(devices=("cpu",) * 3, queue_limit=1)
    ch, stub = d.stub()
    sleeps = {"slow": 0.8, "mid": 0.4, "fast": 0.05}
    reqs = [request(fake_source(sleep=s, salt=k), k) for k, s in sleeps.items()]
    reqs.insert(1, request(fake_source(), "unknown", task="L9/999"))
    reqs.insert(2, request(fake_source(), ""))  # sample id is required in streams
    reqs.append(request(fake_source(salt="deadline", sleep=5), "deadline"))
    reqs[-1].deadline_s = 0.3
    with ch:
        out = list(stub.ScoreStream(iter(reqs), timeout=20))
    by_id = {o.sample_id: o for o in out}
    assert len(out) == 6
    assert by_id["unknown"].verdict == pb.VERDICT_UNSPECIFIED
    assert by_id["unknown"].error.code_name == "INVALID_ARGUMENT"
    assert "sample_id is required" in by_id[""].error.message
    order = [o.sample_id for o in out if o.sample_id in sleeps]
    assert order == ["fast", "mid", "slow"]
    # It ran past its own deadline: the candidate's slowness, a verdict (evalfarm.eval_budget).
    assert by_id["deadline"].verdict == pb.VERDICT_TIMEOUT
    assert "deadline" in by_id["deadline"].detail


def test_stream_queue_full_is_per_item(daemon_factory) -> None:
    d = daemon_factory(queue_limit=0)
    ch, stub = d.stub()
    reqs = [request(fake_source(sleep=0.5, salt=str(i)), f"s{i}") for i in range(3)]
    with ch:
        out = list(stub.ScoreStream(iter(reqs), timeout=20))
    codes = sorted(o.error.code_name or "OK" for o in out)
    assert codes == ["OK", "RESOURCE_EXHAUSTED", "RESOURCE_EXHAUSTED"]


def test_auth(daemon_factory) -> None:
    d = daemon_factory(auth_token=TOKEN)
    ch, stub = d.stub()
    with ch:
        for md in ((), (("authorization", "Bearer wrong-token-xxxxxxxx"),), (("authorization", TOKEN),)):
            for call in (lambda m: stub.Score(request(fake_source()), timeout=5, metadata=m),
                         lambda m: stub.Capacity(pb.CapacityRequest(), timeout=5, metadata=m),
                         lambda m: list(stub.ScoreStream(iter([request(fake_source())]), timeout=5, metadata=m))):
                with pytest.raises(grpc.RpcError) as err:
                    call(md)
                assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert d.backend.started == 0
        good = (("authorization", f"Bearer {TOKEN}"),)
        assert stub.Score(request(fake_source()), timeout=5, metadata=good).verdict == pb.VERDICT_OK
        health = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert health.status == health_pb2.HealthCheckResponse.SERVING


def test_refuses_non_loopback_without_token() -> None:
    with pytest.raises(ServerConfigError, match="non-loopback"):
        ServerConfig(host="0.0.0.0")
    ServerConfig(host="0.0.0.0", auth_token=TOKEN)
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("[::1]")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("example.com")


def test_reflection_lists_services(daemon_factory) -> None:
    d = daemon_factory()
    ch, _ = d.stub()
    with ch:
        stub = reflection_pb2_grpc.ServerReflectionStub(ch)
        reply = next(stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                               timeout=5))
    names = {s.name for s in reply.list_services_response.service}
    assert {"evalfarm.v1.EvalFarm", "grpc.health.v1.Health"} <= names


def test_drain_finishes_in_flight_then_cancels_rest(daemon_factory) -> None:
    d = daemon_factory(devices=("cpu",) * 2, drain_timeout_s=1.0)
    ch, stub = d.stub()
    with ch, concurrent.futures.ThreadPoolExecutor(4) as pool:
        quick = pool.submit(stub.Score, request(fake_source(sleep=0.3, salt="q"), "quick"), timeout=20)
        slow = pool.submit(stub.Score, request(fake_source(sleep=30, salt="s"), "slow"), timeout=20)
        assert wait_until(lambda: d.backend.started == 2, 5)
        drainer = threading.Thread(target=d.drain)
        drainer.start()
        assert wait_until(lambda: d.daemon.service.draining, 5)
        with pytest.raises(grpc.RpcError) as err:
            stub.Score(request(fake_source(salt="new"), "new"), timeout=5)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE and "draining" in err.value.details()
        assert quick.result(10).verdict == pb.VERDICT_OK
        late = slow.result(10)
        assert late.verdict == pb.VERDICT_INFRA_ERROR and late.detail == "daemon draining"
        drainer.join(30)
        assert not drainer.is_alive()
        assert d.backend.evaluations[-1].cancelled or d.backend.evaluations[-2].cancelled


def test_metrics_endpoint(daemon_factory) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    d = daemon_factory(metrics_port=port)
    ch, stub = d.stub()
    with ch:
        stub.Score(request(fake_source()), timeout=5)
        stub.Score(request(fake_source()), timeout=5)
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    # the first is evaluated on slot 0, the second answered from the result cache
    assert 'evalfarm_verdicts_total{gpu_uuid="cpu",slot="0",verdict="OK"} 1.0' in text
    assert 'evalfarm_verdicts_total{gpu_uuid="",slot="cache",verdict="OK"} 1.0' in text
    assert 'evalfarm_result_cache_total{outcome="hit"} 1.0' in text
    assert "evalfarm_queue_depth" in text and "evalfarm_phase_seconds_bucket" in text


def test_cache_survives_restart(daemon_factory, tmp_path: Path) -> None:
    d1 = daemon_factory(cache_dir=tmp_path)
    ch, stub = d1.stub()
    with ch:
        stub.Score(request(fake_source(sleep=0.2, salt="persist")), timeout=5)
    d1.stop()
    backend = FakeBackend()
    d2 = daemon_factory(cache_dir=tmp_path, backend=backend)
    ch, stub = d2.stub()
    with ch:
        r = stub.Score(request(fake_source(sleep=0.2, salt="persist")), timeout=5)
    assert r.evidence.cached and backend.started == 0


def test_capacity(daemon_factory) -> None:
    d = daemon_factory(devices=("cpu",) * 2, queue_limit=3)
    ch, stub = d.stub()
    with ch:
        call = stub.Score.future(request(fake_source(sleep=1.0, salt="c")), timeout=10)
        assert wait_until(lambda: d.backend.started == 1, 5)
        cap = stub.Capacity(pb.CapacityRequest(), timeout=5)
        assert (cap.slots, cap.free_slots, cap.running, cap.queue_limit, cap.device_mode) == (2, 1, 1, 3, "cpu")
        assert not cap.draining
        call.result(10)


def test_stub_module_usable() -> None:
    assert hasattr(pb_grpc, "EvalFarmStub")


def test_reverification_runs_ahead_of_queued_work(daemon_factory) -> None:
    d = daemon_factory(queue_limit=3)
    ch, stub = d.stub()
    with ch, concurrent.futures.ThreadPoolExecutor(6) as pool:
        running = pool.submit(stub.Score, request(fake_source(sleep=0.6, salt="run"), "run"), timeout=30)
        assert wait_until(lambda: d.backend.started == 1, 5)
        queued = []
        for i in range(3):  # fills the ordinary queue
            queued.append(pool.submit(stub.Score, request(fake_source(sleep=0.2, salt=f"q{i}"), f"q{i}"), timeout=30))
            assert wait_until(lambda n=i + 1: d.daemon.service.slots.queue_depth == n, 5)
        rv = request(fake_source(sleep=0.2, salt="q0"), "rv")  # the same candidate as q0
        rv.reverification = True
        # admitted although the ordinary queue is full; it takes the next free slot
        again = pool.submit(stub.Score, rv, timeout=30)
        assert again.result(20).verdict == pb.VERDICT_OK
        assert [f.result(20).verdict for f in (running, *queued)] == [pb.VERDICT_OK] * 4
    assert [ev.sample_id for ev in d.backend.evaluations] == ["run", "rv", "q0", "q1", "q2"]
    assert not again.result().evidence.cached  # a re-verification is never answered from the cache


def test_request_deadline_counts_from_its_slot_not_the_queue(daemon_factory) -> None:
    d = daemon_factory(queue_limit=4)
    ch, stub = d.stub()
    with ch, concurrent.futures.ThreadPoolExecutor(4) as pool:
        futs = []
        for i in range(3):  # each runs 0.6 s with deadline_s=1.0; the last waits ~1.2 s in the queue
            req = request(fake_source(sleep=0.6, salt=f"d{i}"), f"d{i}")
            req.deadline_s = 1.0
            futs.append(pool.submit(stub.Score, req, timeout=30))
            assert wait_until(lambda n=i + 1: d.backend.started + d.daemon.service.slots.queue_depth == n, 5)
        replies = [f.result(20) for f in futs]
        assert [r.verdict for r in replies] == [pb.VERDICT_OK] * 3
        # the last one spent longer in the daemon than its deadline (counted from enqueue, it
        # would have been cut), yet it was judged: its deadline started when its slot did
        assert replies[2].phases.queue_s > 0.6
        assert replies[2].phases.total_s > 1.0
        # while an evaluation that runs past its own deadline ends there, as TIMEOUT: the verdict a
        # local score with the same deadline gives (evalfarm.eval_budget)
        late = request(fake_source(sleep=30, salt="late"), "late")
        late.deadline_s = 0.5
        t0 = time.monotonic()
        reply = stub.Score(late, timeout=20)
    assert reply.verdict == pb.VERDICT_TIMEOUT, reply.detail
    assert time.monotonic() - t0 < 15  # the deadline, not the candidate's 30 s (room for a loaded machine)


def test_an_evaluation_stuck_past_its_deadline_and_grace_is_the_farms_fault(daemon_factory) -> None:
    # An evaluation that does not report its TIMEOUT within the grace is hung in the farm: INFRA_ERROR
    # (final at the client), and the daemon cancels it and frees its slot.
    d = daemon_factory(backend=FakeBackend(stuck=True), deadline_grace_s=0.5)
    ch, stub = d.stub()
    late = request(fake_source(sleep=30, salt="stuck"), "stuck")
    late.deadline_s = 0.5
    with ch:
        reply = stub.Score(late, timeout=20)
    assert reply.verdict == pb.VERDICT_INFRA_ERROR and reply.detail.startswith("deadline exceeded"), reply.detail
    assert "farm's fault" in reply.detail
    assert wait_until(lambda: d.backend.evaluations[-1].cancelled, 5)
    assert wait_until(lambda: d.daemon.service.slots.free == 1, 5)


class RecordingPool:
    """A build pool that records what it is asked to build (and builds nothing)."""

    def __init__(self) -> None:
        self.sources: list[str] = []

    def submit(self, source: str, arch: str, timeout_s: float | None = None) -> concurrent.futures.Future[None]:
        self.sources.append(source)
        done: concurrent.futures.Future[None] = concurrent.futures.Future()
        done.set_result(None)
        return done


def test_a_queued_candidate_is_built_while_it_waits_for_a_slot(daemon_factory) -> None:
    pool = RecordingPool()
    d = daemon_factory(build_pool=pool, build_workers=3)
    busy, queued = fake_source(sleep=3.0, salt="busy"), fake_source(salt="queued")
    blocked = fake_source(salt="blocked") + "\nimport socket\nsocket.create_connection(('10.0.0.1', 80))\n"
    ch, stub = d.stub()
    with ch:
        assert stub.Capacity(pb.CapacityRequest(), timeout=5).build_workers == 3
        first = stub.Score.future(request(busy, "busy"), timeout=30)
        wait_until(lambda: d.backend.started == 1, 10)
        second = stub.Score.future(request(queued, "queued"), timeout=30)
        third = stub.Score.future(request(blocked, "blocked"), timeout=30)
        # The slot is still busy with the first; the second is already being built, the blocked
        # one (a static rule refuses to run it) is not.
        wait_until(lambda: queued in pool.sources, 10)
        assert d.backend.started == 1
        time.sleep(0.3)
        assert blocked not in pool.sources
        assert first.result().verdict == pb.VERDICT_OK
        assert second.result().verdict == pb.VERDICT_OK
        third.result()
