"""The client's dispatch logic against in-process daemons with a fake backend."""

from __future__ import annotations

import time

import pytest

from evalfarm.client import FarmClient
from evalfarm.verdict import Verdict

from .conftest import FakeBackend, fake_source


def test_dedupe_and_spread(daemon_factory) -> None:
    a, b = daemon_factory(), daemon_factory()
    with FarmClient([a.target, b.target], poll_interval_s=0.2, queue_allowance=1) as farm:
        ids = [farm.submit("L1/1", fake_source(speedup=1.5, sleep=0.3), f"same{i}") for i in range(5)]
        ids += [farm.submit("L1/1", fake_source(speedup=1.5, sleep=0.3, salt=str(i)), f"d{i}") for i in range(6)]
        got = list(farm.results(timeout=30))
    assert sorted(r.sample_id for r in got) == sorted(ids)
    assert all(r.verdict is Verdict.OK for r in got)
    assert a.backend.started + b.backend.started == 7  # 5 identical -> 1 evaluation
    assert a.backend.started >= 2 and b.backend.started >= 2  # spread over both
    assert all(r.deduped for r in got if r.sample_id.startswith("same"))


def test_infra_error_retried_on_other_host(daemon_factory) -> None:
    bad = daemon_factory(backend=FakeBackend(force_verdict="INFRA_ERROR"))
    good = daemon_factory()
    with FarmClient([bad.target, good.target], poll_interval_s=0.2) as farm:
        for i in range(6):
            farm.submit("L1/1", fake_source(sleep=0.05, salt=str(i)), f"s{i}")
        got = list(farm.results(timeout=30))
    assert len(got) == 6 and all(r.verdict is Verdict.OK for r in got)
    assert {r.host for r in got} == {"fake-host"} and all(r.endpoint == good.target for r in got)


@pytest.mark.parametrize(("second", "agreed", "expect"), [(5.2, True, 5.0), (2.0, False, 2.0)])
def test_reverify_outlier(daemon_factory, second: float, agreed: bool, expect: float) -> None:
    a = daemon_factory(backend=FakeBackend(speedups={"cpu": 5.0}), host_label="host-a")
    b = daemon_factory(backend=FakeBackend(speedups={"cpu": second}), host_label="host-b")
    # first measurement forced onto A: B is added once A has scored
    with FarmClient([a.target, b.target], poll_interval_s=0.2, queue_allowance=0) as farm:
        b.daemon.service.slots.draining = True  # B takes no first measurements...
        farm.submit("L1/1", fake_source(speedup=5.0, sleep=0.8), "x")
        assert _wait(lambda: a.backend.started == 1, 5)
        b.daemon.service.slots.draining = False  # ...but is there for the re-measurement (polled meanwhile)
        (res,) = list(farm.results(timeout=30))
    assert res.verdict is Verdict.OK and res.speedup == expect
    rv = res.result.evidence.reverified
    assert rv["agreed"] is agreed and rv["host"] == "host-b" and rv["speedup"] == second
    assert not rv["same_daemon"] and rv["status"] == ("agreed" if agreed else "disagreed")
    assert res.host == ("host-a" if agreed else "host-b")  # the measurement whose score is kept
    assert [ev.sample_id for ev in b.backend.evaluations] == ["x"]
    if not agreed:
        assert "re-verification disagreed" in res.result.detail


def test_reverify_single_daemon(daemon_factory) -> None:
    a = daemon_factory()
    with FarmClient([a.target], poll_interval_s=0.2) as farm:
        res = farm.score("L1/1", fake_source(speedup=4.0, sleep=0.05), deadline_s=20)
        low = farm.score("L1/1", fake_source(speedup=1.2, sleep=0.05, salt="low"), deadline_s=20)
    rv = res.result.evidence.reverified
    assert res.speedup == 4.0 and rv["same_daemon"] is True and rv["where"].startswith("same daemon")
    assert rv["agreed"] is True and rv["status"] == "agreed" and res.result.detail == ""
    assert a.backend.started == 3  # fresh evaluation (no_cache), not the cached first
    assert low.result.evidence.reverified == {}
    # One owner: the client re-verifies, so the daemon is told not to re-measure in place.
    assert {ev.config.reverify_above for ev in a.backend.evaluations} == {0.0}


def test_no_client_reverify_leaves_the_daemon_rule_alone(daemon_factory) -> None:
    a = daemon_factory()
    with FarmClient([a.target], poll_interval_s=0.2, reverify=False) as farm:
        farm.score("L1/1", fake_source(speedup=4.0), deadline_s=20)
        farm.score("L1/1", fake_source(speedup=4.0, salt="x"), options={"reverify_above": 5.0}, deadline_s=20)
    assert [ev.config.reverify_above for ev in a.backend.evaluations] == [3.0, 5.0]


def test_a_candidate_past_its_deadline_is_timeout_not_a_hang(daemon_factory) -> None:
    a = daemon_factory()
    with FarmClient([a.target], poll_interval_s=0.2) as farm:
        t0 = time.monotonic()
        res = farm.score("L1/1", fake_source(sleep=60, salt="slow"), deadline_s=0.8)
        elapsed = time.monotonic() - t0
    # The candidate's slowness: a verdict (reward of a failure), not a dropped INFRA_ERROR.
    assert res.verdict is Verdict.TIMEOUT, res.result.detail
    assert elapsed < 15.0, elapsed  # the deadline, not the candidate's 60 s (room for a loaded machine)
    assert a.backend.started == 1  # a verdict: not retried


def test_an_evaluation_stuck_in_the_farm_is_infra_error_not_a_hang(daemon_factory) -> None:
    a = daemon_factory(backend=FakeBackend(stuck=True), deadline_grace_s=0.5)
    with FarmClient([a.target], poll_interval_s=0.2) as farm:
        t0 = time.monotonic()
        res = farm.score("L1/1", fake_source(sleep=60, salt="slow"), deadline_s=0.8)
        elapsed = time.monotonic() - t0
    assert res.verdict is Verdict.INFRA_ERROR and res.result.detail.startswith("deadline exceeded")
    assert elapsed < 15.0, elapsed
    assert _wait(lambda: a.backend.evaluations[0].cancelled, 5)


def test_daemon_drained_midflight_work_moves(daemon_factory) -> None:
    a = daemon_factory(drain_timeout_s=0.2)
    b = daemon_factory()
    with FarmClient([a.target, b.target], poll_interval_s=0.2) as farm:
        for i in range(4):
            farm.submit("L1/1", fake_source(sleep=2.0, salt=str(i)), f"s{i}")
        assert _wait(lambda: a.backend.started >= 1, 5)
        a.drain()
        got = list(farm.results(timeout=30))
    assert sorted(r.sample_id for r in got) == ["s0", "s1", "s2", "s3"]
    assert all(r.verdict is Verdict.OK and r.endpoint == b.target for r in got)
    assert farm.stats.get("retries", 0) >= 1


def test_invalid_request_gets_one_result(daemon_factory) -> None:
    a = daemon_factory()
    with FarmClient([a.target], poll_interval_s=0.2) as farm:
        farm.submit("no-such-task", fake_source(), "bad")
        farm.submit("L1/1", fake_source(), "badopt", options={"num_correctness_inputs": -1})
        got = {r.sample_id: r for r in farm.results(timeout=10)}
    assert got["bad"].verdict is Verdict.INFRA_ERROR and got["bad"].error_code == "INVALID_ARGUMENT"
    assert "unknown task" in got["bad"].result.detail
    assert got["badopt"].error_code == "INVALID_ARGUMENT"


def test_no_daemon_reachable_bounded() -> None:
    with FarmClient(["127.0.0.1:1"], poll_interval_s=0.2) as farm:
        t0 = time.monotonic()
        res = farm.score("L1/1", fake_source(), deadline_s=1.0)
    assert res.verdict is Verdict.INFRA_ERROR and time.monotonic() - t0 < 15  # the 1 s deadline, bounded


def _wait(pred, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return bool(pred())


def test_reverify_goes_to_a_daemon_with_the_same_gpu_model(daemon_factory) -> None:
    h100 = {"devices": ("cuda:0",), "gpu_names": ("NVIDIA H100",)}
    a = daemon_factory(host_label="a", **h100)
    b = daemon_factory(host_label="b", devices=("cuda:0",), gpu_names=("NVIDIA A100",))
    c = daemon_factory(host_label="c", **h100)
    with FarmClient([a.target, b.target, c.target], poll_interval_s=0.2, queue_allowance=0) as farm:
        b.daemon.service.slots.draining = c.daemon.service.slots.draining = True
        farm.submit("L1/1", fake_source(speedup=5.0, sleep=0.8), "x")
        assert _wait(lambda: a.backend.started == 1, 5)
        b.daemon.service.slots.draining = c.daemon.service.slots.draining = False
        (res,) = list(farm.results(timeout=30))
    rv = res.result.evidence.reverified
    assert rv["host"] == "c" and rv["first_host"] == "a" and rv["status"] == "agreed"
    assert (a.backend.started, b.backend.started, c.backend.started) == (1, 0, 1)
    assert res.gpu_name == "NVIDIA H100"

    # no other daemon with that model: back to the same one, even with another model idle
    with FarmClient([a.target, b.target], poll_interval_s=0.2, queue_allowance=0) as farm:
        b.daemon.service.slots.draining = True
        farm.submit("L1/1", fake_source(speedup=5.0, sleep=0.8, salt="2"), "y")
        assert _wait(lambda: a.backend.started == 2, 5)
        b.daemon.service.slots.draining = False
        (res,) = list(farm.results(timeout=30))
    rv = res.result.evidence.reverified
    assert rv["same_daemon"] is True and rv["host"] == "a" and b.backend.started == 0
    assert a.backend.started == 3


def test_reverification_is_first_in_line_in_the_client(daemon_factory) -> None:
    a = daemon_factory()
    with FarmClient([a.target], poll_interval_s=0.2, queue_allowance=0) as farm:
        farm.submit("L1/1", fake_source(speedup=5.0, sleep=0.3, salt="x"), "x")
        assert _wait(lambda: a.backend.started == 1, 5)
        for i in range(3):  # wait in the client's queue (no credit) behind the outlier
            farm.submit("L1/1", fake_source(speedup=1.1, sleep=0.2, salt=str(i)), f"o{i}")
        got = {r.sample_id: r for r in farm.results(timeout=30)}
    assert [ev.sample_id for ev in a.backend.evaluations] == ["x", "x", "o0", "o1", "o2"]
    assert got["x"].result.evidence.reverified["status"] == "agreed"


@pytest.mark.parametrize("queue_allowance", [0, 3])
def test_deadline_does_not_run_while_waiting_in_a_queue(daemon_factory, queue_allowance: int) -> None:
    """Four 0.5 s evaluations with deadline_s=0.8 on one slot: the last waits 1.5 s in a queue
    (the client's with queue_allowance=0, the daemon's with 3) and is still scored."""
    a = daemon_factory()
    with FarmClient([a.target], poll_interval_s=0.2, queue_allowance=queue_allowance) as farm:
        t0 = time.monotonic()
        for i in range(4):
            farm.submit("L1/1", fake_source(speedup=1.2, sleep=0.5, salt=str(i)), f"s{i}", deadline_s=0.8)
        got = list(farm.results(timeout=30))
        elapsed = time.monotonic() - t0
    assert len(got) == 4 and all(r.verdict is Verdict.OK for r in got), [r.result.detail for r in got]
    assert elapsed > 1.9 and farm.stats.get("deadline_exceeded", 0) == 0
    assert a.backend.started == 4


def test_every_submit_call_takes_one_signature_and_names_an_unknown_keyword(daemon_factory) -> None:
    import inspect

    from evalfarm.client import AsyncFarmClient

    def params(fn):
        return [p for p in inspect.signature(fn).parameters if p not in ("self", "done")]

    calls = (AsyncFarmClient.submit, AsyncFarmClient.score, AsyncFarmClient.score_nowait,
             FarmClient.submit, FarmClient.score)
    assert {tuple(params(fn)) for fn in calls} == {("task", "source", "sample_id", "fields")}
    a = daemon_factory()
    with FarmClient([a.target], poll_interval_s=0.2) as farm:
        for call in (farm.submit, farm.score):
            with pytest.raises(TypeError, match="dealine_s"):
                call("L1/1", fake_source(), "typo", dealine_s=5)
        res = farm.score("L1/1", fake_source(salt="sig"), "named", deadline_s=20, tags={"k": "v"})
    assert res.sample_id == "named" and res.verdict is Verdict.OK
    assert a.backend.started == 1  # the refused calls queued nothing
