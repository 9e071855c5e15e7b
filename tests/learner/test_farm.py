"""The learner's farm session: one retry owner, outcomes, validated options, shuffled submission,
capacity, bounded waits, owned local daemons."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from learner.rl.farm import Farm, FarmError, FarmOutcome, FarmSettings, LocalDaemons, Outcome
from tests.service.conftest import DaemonThread, FakeBackend, fake_source

REPO = Path(__file__).resolve().parents[2]


class FlakyBackend(FakeBackend):
    """INFRA_ERROR for the first `infra_first` evaluations, then what the source says."""

    def __init__(self, infra_first: int) -> None:
        super().__init__()
        self.infra_first = infra_first

    def __call__(self, task, candidate, config, build_pool, deadline_s=None):  # noqa: ANN001, ANN204
        self.force_verdict = "INFRA_ERROR" if self.started < self.infra_first else None
        return super().__call__(task, candidate, config, build_pool, deadline_s)


def _farm(d: DaemonThread, tmp_path: Path, **kw) -> Farm:  # noqa: ANN003
    return Farm(FarmSettings(endpoints=(d.target,), **kw), tmp_path)


def test_infra_error_is_retried_by_the_client_alone(daemon_factory, tmp_path):
    backend = FlakyBackend(infra_first=2)
    d = daemon_factory(backend=backend, fault_threshold=0)  # counts backend starts: no slot probes
    with _farm(d, tmp_path, max_resubmits=2) as farm:
        farm.submit("s1", "L1/1", fake_source("OK", 1.7))
        out = farm.wait(["s1"], 30)["s1"]
    assert out.verdict is Outcome.OK and out.speedup == pytest.approx(1.7)
    assert out.attempts == 3 and not out.infra
    assert backend.started == 3  # 1 + max_resubmits evaluations, no second retry layer


def test_persistent_infra_error_is_returned_as_infra_never_ok(daemon_factory, tmp_path):
    backend = FlakyBackend(infra_first=10_000)
    d = daemon_factory(backend=backend, fault_threshold=0)  # the client's retries only
    with _farm(d, tmp_path, max_resubmits=1) as farm:
        farm.submit("s1", "L1/1", fake_source("OK", 2.0))
        out = farm.wait(["s1"], 60)["s1"]
    assert out.verdict is Outcome.INFRA_ERROR and out.infra and not out.ok
    assert out.speedup is None and out.attempts == 2
    assert backend.started == 2


def test_outcomes_are_an_enum_and_unknown_ones_are_refused():
    assert FarmOutcome("a", "PARSE_FAILURE").verdict is Outcome.PARSE_FAILURE
    assert FarmOutcome("a", Outcome.LOST).infra and not FarmOutcome("a", Outcome.INCORRECT).infra
    with pytest.raises(ValueError):
        FarmOutcome("a", "MAYBE")


def test_bad_farm_options_are_refused_before_anything_starts():
    with pytest.raises(FarmError, match="num_corectness_inputs"):
        FarmSettings(options={"num_corectness_inputs": 10})
    with pytest.raises(FarmError, match="timing_budget_s"):
        FarmSettings(options={"timing_budget_s": "fast"})
    FarmSettings(options={"num_correctness_inputs": 10, "timing_budget_s": 1.0})


def test_submission_is_shuffled_per_step_and_capacity_is_read(daemon_factory, tmp_path, caplog):
    d = daemon_factory(backend=FakeBackend())
    with _farm(d, tmp_path) as farm:
        assert farm.slots >= 1
        items = [(f"s{i}", "L1/1", fake_source("OK", 1.0 + i / 100), {}) for i in range(12)]
        order_a = farm.submit_many(items[:6], seed="step-1")
        order_b = farm.submit_many(items[6:], seed="step-2")
        given_a, given_b = [it[0] for it in items[:6]], [it[0] for it in items[6:]]
        assert sorted(order_a) == sorted(given_a) and sorted(order_b) == sorted(given_b)
        assert (order_a, order_b) != (given_a, given_b)  # shuffled (both sorted: 1 in 518400)
        assert farm.submit_many([], seed="step-1") == []
        got = farm.wait(order_a + order_b, 60)
        assert all(o.ok for o in got.values())
        with caplog.at_level("WARNING"):
            assert not farm.check_step_size(4 * farm.slots + 1)
        assert "add farm GPUs" in caplog.text
        assert farm.check_step_size(farm.slots)


def test_wait_is_bounded_and_a_late_result_is_dropped(daemon_factory, tmp_path):
    d = daemon_factory(backend=FakeBackend())
    with _farm(d, tmp_path) as farm:
        farm.submit("slow", "L1/1", fake_source("OK", 2.0, sleep=2.0))
        t0 = time.monotonic()
        out = farm.wait(["slow"], 0.3)["slow"]
        assert time.monotonic() - t0 < 5
        assert out.verdict is Outcome.LOST and out.infra
        farm.submit("fast", "L1/1", fake_source("OK", 3.0, salt="x"))
        time.sleep(2.5)
        got = farm.wait(["fast"], 30)
    assert set(got) == {"fast"} and got["fast"].speedup == pytest.approx(3.0)
    assert farm.stats["late_dropped"] == 1 and farm.stats["lost"] == 1


def test_results_of_two_batches_come_back_to_the_right_wait(daemon_factory, tmp_path):
    d = daemon_factory(backend=FakeBackend())
    with _farm(d, tmp_path) as farm:
        for i in range(3):
            farm.submit(f"a{i}", "L1/1", fake_source("OK", 1.0 + i, salt=f"a{i}"))
            farm.submit(f"b{i}", "L1/1", fake_source("INCORRECT", None, salt=f"b{i}"))
        b = farm.wait([f"b{i}" for i in range(3)], 30)
        a = farm.wait([f"a{i}" for i in range(3)], 30)
        with pytest.raises(ValueError, match="already submitted"):
            farm.submit("a0", "L1/1", "x")  # delivered ids stay reserved only while pending
    assert [b[f"b{i}"].verdict for i in range(3)] == ["INCORRECT"] * 3
    assert [a[f"a{i}"].speedup for i in range(3)] == [1.0, 2.0, 3.0]


def test_local_daemon_is_owned_and_reaped(tmp_path):
    local = LocalDaemons(1, device="cpu", slots=1, cache_dir=tmp_path / "cache", log_dir=tmp_path / "logs")
    proc = local.procs[0]
    assert proc.poll() is None and local.endpoints[0].startswith("127.0.0.1:")
    local.stop()
    assert proc.poll() is not None and local.procs == []


def test_local_daemon_exits_when_its_learner_is_killed(tmp_path):
    """SIGKILL the process that owns a local daemon: the daemon notices and exits on its own."""
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(REPO)!r})
        from pathlib import Path
        from learner.rl.farm import LocalDaemons
        local = LocalDaemons(1, device="cpu", slots=1, cache_dir=Path({str(tmp_path)!r}) / "c",
                             log_dir=Path({str(tmp_path)!r}) / "l")
        print(local.procs[0].pid, flush=True)
        time.sleep(600)
    """)
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        line = [None]
        reader = threading.Thread(target=lambda: line.__setitem__(0, owner.stdout.readline()), daemon=True)
        reader.start()
        reader.join(120)
        assert line[0], "the owner did not start its daemon"
        daemon_pid = int(line[0])
        os.kill(daemon_pid, 0)  # alive
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
        deadline = time.monotonic() + 60
        alive = True
        while alive and time.monotonic() < deadline:
            try:
                os.kill(daemon_pid, 0)
                with open(f"/proc/{daemon_pid}/stat") as f:
                    alive = f.read().split()[2] != "Z"
            except (ProcessLookupError, FileNotFoundError):
                alive = False
            time.sleep(0.2)
        assert not alive, "the daemon outlived its owner by more than 60 s"
    finally:
        if owner.poll() is None:
            owner.kill()
        owner.stdout.close()


def test_farm_over_tls_and_bad_tls_settings(daemon_factory, pki, tmp_path):
    d = daemon_factory(tls_cert=pki / "server.pem", tls_key=pki / "server.key")
    with _farm(d, tmp_path, tls_ca=str(pki / "ca.pem")) as farm:
        farm.submit("t1", "L1/1", fake_source("OK", 1.9))
        assert farm.wait(["t1"], 30)["t1"].speedup == pytest.approx(1.9)
    with pytest.raises(FarmError, match="go together"):
        _farm(d, tmp_path, tls_ca=str(pki / "ca.pem"), tls_cert=str(pki / "client.pem"))


def test_local_daemons_run_weak_only_where_the_host_has_no_strong_sandbox(tmp_path, monkeypatch, caplog):
    """A local farm scores this run's own samples on loopback: where the host cannot give the
    strong sandbox, "best" starts its daemons weak and says what is missing; "strong" refuses."""
    from evalfarm.sandbox import isolation
    from learner.rl.farm import local_weak_sandbox

    assert local_weak_sandbox("cpu", "best") is (not isolation.assess("cpu").strong)
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on it
    with caplog.at_level("WARNING", logger="learner.rl.farm"):
        assert local_weak_sandbox("cpu", "best") is True
    assert "WEAK sandbox" in caplog.text and "bwrap not found on PATH" in caplog.text
    with pytest.raises(FarmError, match="farm.local_sandbox = 'strong'.*install bubblewrap"):
        local_weak_sandbox("cpu", "strong")
    with pytest.raises(FarmError, match="farm.local_sandbox must be one of best, strong"):
        FarmSettings(local_sandbox="maybe")


def test_the_demos_local_farm_starts_on_a_machine_without_bubblewrap(tmp_path, monkeypatch):
    """`make demo` on a fresh machine: no bwrap on PATH, the local daemon starts weak and says so."""
    import grpc

    from evalfarm.v1 import evalfarm_pb2 as pb
    from evalfarm.v1 import evalfarm_pb2_grpc as pb_grpc

    monkeypatch.setenv("PATH", str(tmp_path))  # inherited by the daemon: no bwrap there
    local = LocalDaemons(1, device="cpu", slots=1, cache_dir=tmp_path / "cache", log_dir=tmp_path / "logs")
    try:
        with grpc.insecure_channel(local.endpoints[0]) as ch:
            cap = pb_grpc.EvalFarmStub(ch).Capacity(pb.CapacityRequest(), timeout=10)
        assert cap.sandbox.startswith("WEAK: ") and "bwrap not found on PATH" in cap.sandbox
    finally:
        local.stop()
    assert "WARNING: serving untrusted candidates with a weak sandbox" in (tmp_path / "logs" / "daemon-0.log").read_text()
