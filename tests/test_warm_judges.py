"""Judges started ahead of need (evalfarm.judge.standby): used once, replaced, never left behind."""

from __future__ import annotations

import os
import signal
import time

import pytest

from evalfarm import ScoreConfig, Verdict
from evalfarm.judge.standby import JudgeProcess, WarmJudges
from evalfarm.scoring import as_candidate, as_task, start
from tests.service.conftest import descendants, process_state, wait_until

QUICK = ScoreConfig(num_correctness_inputs=20, timing_budget_s=0.5, min_timed_rounds=21)


@pytest.fixture(scope="module")
def task(data_dir):
    return as_task(str(data_dir / "task_scale.py"))


def _gone(pids: list[int]) -> bool:
    return all(process_state(p) in (None, "Z") for p in pids)


def _workers_started(judge: JudgeProcess) -> bool:
    # The judge reports its workers' process groups as soon as it starts them.
    judge._drain_reports()
    return len(judge.worker_pgids) == 2


def test_a_standby_starts_its_workers_before_any_request_and_exits_when_nobody_takes_it():
    judge = JudgeProcess("cpu", request_timeout_s=20.0)
    try:
        assert wait_until(lambda: _workers_started(judge), 60), "the standby never started its workers"
        pids = [judge.proc.pid, *descendants(judge.proc.pid)]
        assert judge.proc.poll() is None
        # Its idle timeout: it exits by itself, and its workers die with it.
        assert wait_until(lambda: judge.proc.poll() is not None, 60), "an idle standby outlived its timeout"
        assert judge.proc.returncode == 0
        assert wait_until(lambda: _gone(pids), 15), [p for p in pids if not _gone([p])]
        assert not judge.usable()
    finally:
        judge.close()
    assert not os.path.exists(judge.run_dir.path)


def test_an_evaluation_takes_a_warm_judge_which_serves_it_alone(task, data_dir, build_pool):
    judges = WarmJudges({"cpu": 1})
    try:
        judges.fill()
        first = next(iter(judges._ready["cpu"]))
        assert wait_until(lambda: _workers_started(first), 60)
        assert wait_until(lambda: (first._drain_reports(), first.ready)[1], 60), "the standby never said ready"
        ev = start(task, as_candidate(str(data_dir / "cand_same.py")), QUICK, build_pool, judges=judges)
        r = ev.result(timeout=240)
        assert r.verdict is Verdict.OK, r.detail
        assert judges.taken_warm == 1 and judges.taken_cold == 0
        assert ev._judges == [first], "the evaluation did not use the standby"
        assert r.evidence.phases_s["judge_started_ahead"] > 0.5  # it had been waiting, started up
        # Its start-up, by the host's clock: imports, then workers and device, all before its request.
        # The figures are rounded to the millisecond, so imports and the whole start-up may be equal.
        ph = r.evidence.phases_s
        assert 0 < ph["standby_imports"] <= ph["standby_startup"] <= ph["judge_started_ahead"]
        assert ph["teardown"] > 0  # workers killed and reaped before the result was sent
        # When the result is out, the judge that served it and its workers are gone, with its
        # files; a fresh standby (another process, another directory) waits in its place.
        used = [first.proc.pid, *first.worker_pgids]
        assert wait_until(lambda: _gone(used), 15)
        assert not os.path.exists(first.run_dir.path)
        assert judges.standby_count() == 1
        fresh = next(iter(judges._ready["cpu"]))
        assert fresh is not first and fresh.proc.pid not in used and fresh.run_dir.path != first.run_dir.path
        # The replacement started while the evaluation set up; its timed rounds waited until the
        # replacement had started up (no start-up competing with them).
        assert "held_for_standby" in r.evidence.phases_s
        assert fresh.ready, "the rounds began before the replacement standby was up"
    finally:
        judges.close()


def test_a_dead_standby_is_replaced_not_handed_out(task, data_dir, build_pool):
    judges = WarmJudges({"cpu": 1})
    try:
        judges.fill()
        standby = next(iter(judges._ready["cpu"]))
        os.killpg(standby.proc.pid, signal.SIGKILL)
        standby.proc.wait(10)
        ev = start(task, as_candidate(str(data_dir / "cand_fast.py")), QUICK, build_pool, judges=judges)
        r = ev.result(timeout=240)
        assert r.verdict is Verdict.OK, r.detail
        assert judges.taken_cold == 1 and judges.taken_warm == 0
        assert ev._judges[0] is not standby
    finally:
        judges.close()


def test_closing_the_pool_kills_every_standby_and_removes_its_files():
    judges = WarmJudges({"cpu": 2})
    judges.fill()
    standbys = list(judges._ready["cpu"])
    assert len(standbys) == 2
    assert wait_until(lambda: all(_workers_started(j) for j in standbys), 60)
    pids = [p for j in standbys for p in (j.proc.pid, *descendants(j.proc.pid))]
    judges.close()
    assert wait_until(lambda: _gone(pids), 15)
    assert not any(os.path.exists(j.run_dir.path) for j in standbys)
    assert judges.standby_count() == 0
    later = judges.take("cpu")  # after close: started on demand, never kept
    try:
        assert judges.standby_count() == 0 and judges.taken_cold == 1
    finally:
        later.close()


def test_a_cancelled_evaluation_kills_the_warm_judge_it_took(task, data_dir, build_pool):
    judges = WarmJudges({"cpu": 1})
    try:
        judges.fill()
        ev = start(task, as_candidate(str(data_dir / "cand_hang.py")), QUICK.replace(min_call_timeout_s=60.0),
                   build_pool, judges=judges)
        # The evaluation reads its judge's reports itself: wait for what it recorded.
        assert wait_until(lambda: bool(ev._judges) and len(ev._judges[0].worker_pgids) == 2, 60)
        taken = ev._judges[0]
        pids = [taken.proc.pid, *descendants(taken.proc.pid)]
        time.sleep(1.0)
        ev.cancel()
        r = ev.result(timeout=60)
        assert r.verdict is Verdict.INFRA_ERROR and "cancelled" in r.detail
        assert wait_until(lambda: _gone(pids), 15)
        assert not os.path.exists(taken.run_dir.path)
    finally:
        judges.close()


def test_depths_are_validated():
    with pytest.raises(ValueError, match="depth"):
        WarmJudges({"cpu": -1})
    with pytest.raises(ValueError, match="idle timeout"):
        WarmJudges({"cpu": 1}, idle_timeout_s=10.0)


def test_a_standby_whose_worker_dies_exits_and_is_not_handed_out():
    judge = JudgeProcess("cpu", request_timeout_s=600.0)
    try:
        assert wait_until(lambda: _workers_started(judge), 60)
        os.killpg(judge.worker_pgids[1], signal.SIGKILL)
        assert wait_until(lambda: judge.proc.poll() is not None, 30), "the judge stood by with a dead worker"
        assert not judge.usable()
    finally:
        judge.close()


def test_wait_ready_reports_a_standby_that_has_started_up():
    judges = WarmJudges({"cpu": 1})
    try:
        judges.fill()
        # Just started (an interpreter and torch take seconds): a cancelled wait returns at once.
        t0 = time.monotonic()
        assert not judges.wait_ready("cpu", 30, cancelled=lambda: True)
        assert time.monotonic() - t0 < 15  # not the 30 s wait (room for a loaded machine)
        assert judges.wait_ready("cpu", 120)
        assert all(j.ready for j in judges._ready["cpu"])
        assert judges.wait_ready("cuda:7", 0.1)  # no standbys kept for it: nothing to wait for
    finally:
        judges.close()


def test_a_standby_announces_ready_before_its_host_warm_up_and_still_takes_the_request():
    # The owner holds its running evaluation's rounds until "standby_ready": a warm-up that only
    # uses the host (the meta kernels' import) must come after it, not hold that evaluation.
    from multiprocessing import Pipe

    from evalfarm.judge import framing
    from evalfarm.judge.serve import wait_for_request

    judge_end, owner_end = Pipe()
    order: list[str] = []

    def warm_up() -> None:
        # By now the owner can read the announcement, and no request has been read yet.
        assert owner_end.poll(5)
        order.append(framing.recv_json(owner_end, 5)["op"])
        order.append("warm-up")
        framing.send_json(owner_end, {"op": "score", "n": 7})

    request = wait_for_request(judge_end, None, 10, warm_up)
    assert order == ["standby_ready", "warm-up"]
    assert request == {"op": "score", "n": 7}


def test_warm_host_is_a_no_op_off_the_gpu_runs_beside_the_request_and_survives_a_failure(monkeypatch):
    import threading

    from evalfarm.judge import serve as serve_mod

    release = threading.Event()
    calls: list[str] = []

    def slow_meta() -> None:
        calls.append("meta")
        release.wait(10)

    monkeypatch.setattr(serve_mod, "warm_meta", slow_meta)
    assert serve_mod.warm_host("cpu") is None
    assert calls == []
    # It returns while the warm-up still runs: the judge reads its request meanwhile.
    thread = serve_mod.warm_host("cuda")
    assert thread is not None and thread.daemon
    assert thread.is_alive()
    release.set()
    thread.join(10)
    assert calls == ["meta"] and not thread.is_alive()

    def broken() -> None:
        raise RuntimeError("no meta kernels")

    monkeypatch.setattr(serve_mod, "warm_meta", broken)
    thread = serve_mod.warm_host("cuda:0")  # logged, not raised: the evaluation pays the import instead
    thread.join(10)
    assert not thread.is_alive()


def test_rounds_hold_counts_from_the_owners_go_and_never_waits_past_its_bound(monkeypatch):
    from multiprocessing import Pipe

    from evalfarm.judge import framing
    from evalfarm.judge import serve as serve_mod
    from evalfarm.judge.serve import RoundsHold

    # Nothing starting up: the owner's immediate answer is go.
    judge_end, owner_end = Pipe()
    framing.send_json(owner_end, {"op": "go"})
    hold = RoundsHold(judge_end)
    hold.ask()
    assert framing.recv_json(owner_end, 1) == {"op": "before_rounds"}
    assert hold.released()

    # A standby starting up: "hold" first, rounds go on, times count from the later go.
    judge_end, owner_end = Pipe()
    framing.send_json(owner_end, {"op": "hold"})
    hold = RoundsHold(judge_end)
    hold.ask()
    assert not hold.released() and not hold.released()
    framing.send_json(owner_end, {"op": "go"})
    assert hold.released()

    # An owner that never says go: the judge waits at most BEFORE_ROUNDS_TIMEOUT_S, then goes on.
    monkeypatch.setattr(serve_mod, "BEFORE_ROUNDS_TIMEOUT_S", 0.3)
    judge_end, owner_end = Pipe()
    framing.send_json(owner_end, {"op": "hold"})
    hold = RoundsHold(judge_end)
    hold.ask()
    assert not hold.released()
    t = time.monotonic()
    assert hold.released(wait=True)
    assert time.monotonic() - t < 10  # its 0.3 s bound, not the 30 s default

    # Anything else is a protocol error, not a silent go.
    judge_end, owner_end = Pipe()
    framing.send_json(owner_end, {"op": "result"})
    with pytest.raises(framing.ProtocolError):
        RoundsHold(judge_end).ask()


class _StartingUp(WarmJudges):
    """Judges on demand, and a standby pool that reports a start-up for ``seconds`` after an
    evaluation asks: what the owner sees while a replacement standby starts."""

    def __init__(self, seconds: float, hold_rounds: bool = True) -> None:
        super().__init__({"cpu": 0}, hold_rounds=hold_rounds)
        self.seconds = seconds
        self.asked: list[float] = []

    def wait_ready(self, device, timeout_s, cancelled=lambda: False):
        if timeout_s == 0:
            self.asked.append(time.monotonic())
            return False
        time.sleep(self.seconds)
        return True


def _score_while_starting_up(judges, task, data_dir, build_pool, blocks, protocol="lone"):
    """An identical copy scored while ``judges`` reports a standby starting up (closed after)."""
    cfg = ScoreConfig(num_correctness_inputs=20, timing_budget_s=0.5, min_timed_rounds=21, warmup_rounds=2,
                      correctness_block=blocks, timing_protocol=protocol)
    try:
        r = start(task, as_candidate(str(data_dir / "cand_same.py")), cfg, build_pool, judges=judges).result(timeout=240)
    finally:
        judges.close()
    assert r.verdict is Verdict.OK, r.detail
    return r, cfg


@pytest.mark.parametrize(("blocks", "protocol"), [(False, "lone"), (True, "lone"), (False, "blocks")])
def test_rounds_run_during_a_standby_start_up_are_checked_but_not_timed(task, data_dir, build_pool, blocks, protocol):
    judges = _StartingUp(seconds=4.0)
    r, cfg = _score_while_starting_up(judges, task, data_dir, build_pool, blocks, protocol)
    assert len(judges.asked) == 1
    # The 20 correctness rounds all ran before the go (they take far less than 4 s here), so at
    # least the 18 after the warm-up were checked and set aside (whole batches are planned, so
    # the rest of the first batch too); the judge then waited for the go, and the rounds that
    # make the score came after it. In correctness blocks those 18 are block rounds instead (never
    # timed either way), and a batch ends where correctness does, so nothing else is set aside.
    # Under timed blocks (evalfarm.judge.timed_blocks) correctness rounds are never samples, and the
    # timed blocks all come after correctness: nothing is set aside, and every sample follows the go.
    assert r.evidence.correctness_inputs == 20
    assert r.evidence.timing.protocol == protocol
    if protocol == "blocks":
        assert r.evidence.timing.set_aside_rounds == 0 and r.evidence.timing.timed_block_rounds > 0, r.evidence.timing
    elif blocks:
        assert r.evidence.timing.block_rounds == 18 and r.evidence.timing.set_aside_rounds == 0, r.evidence.timing
    else:
        assert r.evidence.timing.set_aside_rounds >= 18 and r.evidence.timing.block_rounds == 0
    assert r.evidence.phases_s["held_for_standby"] > 1.0
    assert r.evidence.timing.rounds >= cfg.min_timed_rounds
    # The wait is its own phase: neither correctness nor timing (whose budget starts after it).
    assert r.evidence.phases_s["timing"] < r.evidence.phases_s["held_for_standby"]


def test_with_the_hold_off_rounds_during_a_start_up_are_timed_and_nothing_waits(task, data_dir, build_pool):
    # The operator's --standby-hold off: the evaluation does not ask whether a standby is starting.
    judges = _StartingUp(seconds=4.0, hold_rounds=False)
    r, _ = _score_while_starting_up(judges, task, data_dir, build_pool, blocks=False)
    assert judges.asked == []
    assert r.evidence.timing.set_aside_rounds == 0
    assert r.evidence.phases_s["held_for_standby"] == 0.0


def test_the_standby_hold_is_the_operators_switch():
    import argparse

    from evalfarm.server.cli import add_serve_arguments, config_from_args

    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    assert config_from_args(parser.parse_args(["--device", "cpu"])).standby_hold is True
    assert config_from_args(parser.parse_args(["--device", "cpu", "--standby-hold", "off"])).standby_hold is False
    with pytest.raises(SystemExit):
        parser.parse_args(["--standby-hold", "maybe"])


def test_without_a_start_up_every_round_after_the_warm_up_is_timed(task, data_dir, build_pool):
    cfg = ScoreConfig(num_correctness_inputs=20, timing_budget_s=0.5, min_timed_rounds=21, warmup_rounds=2)
    r = start(task, as_candidate(str(data_dir / "cand_same.py")), cfg, build_pool).result(timeout=240)
    assert r.verdict is Verdict.OK, r.detail
    assert r.evidence.timing.set_aside_rounds == 0
    assert r.evidence.phases_s["held_for_standby"] == 0.0


def test_a_standby_warms_its_host_only_where_the_operator_asks(monkeypatch):
    """META_WARMUP_ENV: off by default (a standby taken during the warm-up shares its interpreter
    with the evaluation's rounds); "1" runs warm_host after the standby announced itself ready."""
    import threading

    from evalfarm.judge import serve as serve_mod

    ran = threading.Event()
    monkeypatch.setattr(serve_mod, "warm_meta", ran.set)
    for setting in ("", "0", "yes"):
        assert serve_mod.host_warm_up("cuda", setting) is None
    warm_up = serve_mod.host_warm_up("cuda", "1")
    thread = warm_up()
    thread.join(10)
    assert ran.is_set()
