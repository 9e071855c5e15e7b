"""The operator's switches that shorten a worker exchange (judge.GO_FIRST_ENV, JUDGE_SPIN_ENV,
ROUND_WRITE_ENV, on by default; REFERENCE_POISON_ENV): what each changes in the exchange, read from the round trace
(evalfarm.judge.round_trace), and that verdicts and the guarantees they rest on stay as they were."""

from __future__ import annotations

import socket
import threading
import time
from multiprocessing.connection import Connection

import pytest
from traced_scoring import traced_score

from evalfarm import ScoreConfig, Verdict
from evalfarm.judge import framing
from evalfarm.judge.exchange import (
    DEFAULT_JUDGE_SPIN_US,
    GO_FIRST_ENV,
    JUDGE_SPIN_ENV,
    PREPARE_AHEAD_ENV,
    REFERENCE_POISON_ENV,
    ROUND_WRITE_ENV,
    judge_spin_s,
)
from evalfarm.scoring import as_candidate, as_task

# The exchange shortcuts are a lone call's: these tests time lone calls.
QUICK = ScoreConfig(num_correctness_inputs=40, timing_budget_s=0.5, min_timed_rounds=20, warm_call=False,
                    timing_protocol="lone")


def _traced(monkeypatch, tmp_path, task, candidate, build_pool, env: dict[str, str], **changes):
    return traced_score(monkeypatch, tmp_path, task, candidate, build_pool, QUICK.replace(**changes), env)


@pytest.fixture(scope="module")
def task(data_dir):
    return as_task(str(data_dir / "task_scale.py"))


def _lone_rounds(lines):
    """{round: [its exchanges, in order]} for the lone calls after the first round."""
    rounds: dict[int, list[dict]] = {}
    for x in lines:
        if not x["block"] and x["rounds"][0] > 0:
            rounds.setdefault(x["rounds"][0], []).append(x)
    return rounds


def test_round_write_writes_both_workers_inputs_in_a_rounds_first_exchange(monkeypatch, tmp_path, task, data_dir,
                                                                          build_pool):
    r, lines = _traced(monkeypatch, tmp_path, task, as_candidate(str(data_dir / "cand_same.py")), build_pool,
                       {ROUND_WRITE_ENV: "1"})
    assert r.verdict is Verdict.OK, r.detail
    assert 0.5 < r.speedup < 2.0
    rounds = _lone_rounds(lines)
    assert len(rounds) >= QUICK.min_timed_rounds
    both = 0
    for r_, (first, second) in rounds.items():
        assert first["role"] != second["role"], r_
        if "wrote" in first:  # both prepared ahead: the first exchange wrote both, the second none
            assert sorted(first["wrote"]) == ["candidate", "reference"] and second["wrote"] == [], (first, second)
            assert "prepare_us" not in first and "prepare_us" not in second
            both += 1
        else:
            assert "wrote" not in second, (first, second)
    # Every lone round after the first one's is prepared ahead on both sides.
    assert both >= len(rounds) - 1, (both, len(rounds))
    # Blocks write only their own worker's inputs, as before.
    assert not any("wrote" in x for x in lines if x["block"])


def test_with_round_write_off_each_exchange_writes_its_own_workers_inputs(monkeypatch, tmp_path, task, data_dir,
                                                                        build_pool):
    r, lines = _traced(monkeypatch, tmp_path, task, as_candidate(str(data_dir / "cand_same.py")), build_pool,
                       {ROUND_WRITE_ENV: "0"})
    assert r.verdict is Verdict.OK, r.detail
    assert not any("wrote" in x for x in lines)


def test_round_write_needs_preparation_ahead(monkeypatch, tmp_path, task, data_dir, build_pool):
    """With preparation ahead off, every exchange prepares first: nothing is written ahead of it."""
    r, lines = _traced(monkeypatch, tmp_path, task, as_candidate(str(data_dir / "cand_same.py")), build_pool,
                       {ROUND_WRITE_ENV: "1", PREPARE_AHEAD_ENV: "0"})
    assert r.verdict is Verdict.OK, r.detail
    assert all("prepare_us" in x for x in lines) and not any("wrote" in x for x in lines)


@pytest.mark.parametrize("env", [{GO_FIRST_ENV: "0"}, {ROUND_WRITE_ENV: "0"}, {},
                                 {ROUND_WRITE_ENV: "0", GO_FIRST_ENV: "0"}],
                         ids=["round-write", "go-first", "both (the default)", "neither"])
def test_a_candidate_wrong_after_its_first_calls_is_still_caught(monkeypatch, tmp_path, task, data_dir, build_pool,
                                                                 env):
    r, lines = _traced(monkeypatch, tmp_path, task, as_candidate(str(data_dir / "cand_wrong_after_12.py")), build_pool,
                       env,
                       correctness_block=False)
    assert r.verdict is Verdict.INCORRECT, (r.verdict, r.detail)
    # It went wrong in a lone call prepared ahead: the path the switches change.
    assert any("ahead_us" in x and "prepare_us" not in x for x in lines if x["role"] == "candidate")


def test_both_cpu_switches_on_an_identical_copy_scores_about_one(monkeypatch, tmp_path, task, data_dir, build_pool):
    r, lines = _traced(monkeypatch, tmp_path, task, as_candidate(str(data_dir / "cand_same.py")), build_pool,
                       {ROUND_WRITE_ENV: "1", GO_FIRST_ENV: "1"})
    assert r.verdict is Verdict.OK, r.detail
    assert 0.5 < r.speedup < 2.0
    assert r.evidence.timing.rounds >= QUICK.min_timed_rounds
    assert any("wrote" in x for x in lines)


@pytest.mark.gpu
def test_on_a_gpu_every_switch_on_an_identical_copy_scores_one(monkeypatch, tmp_path, data_dir, build_pool):
    """The three switches together on a GPU (the spin applies there only): a copy of the reference
    scores 1.00, both workers' pre-call moments match, and the rounds were written ahead."""
    relu = as_task(str(data_dir / "gpu" / "task_relu.py"))
    r, lines = _traced(monkeypatch, tmp_path, relu, as_candidate(str(data_dir / "gpu" / "cand_same.py")), build_pool,
                       {ROUND_WRITE_ENV: "1", GO_FIRST_ENV: "1", JUDGE_SPIN_ENV: "2000"}, device="cuda",
                       num_correctness_inputs=200, timing_budget_s=5.0, min_timed_rounds=70)
    assert r.verdict is Verdict.OK, r.detail
    assert sum("wrote" in x for x in lines) > 100
    t = r.evidence.timing
    assert abs(t.pre_call_cand_us_median - t.pre_call_ref_us_median) < 0.2 * t.pre_call_ref_us_median, t
    assert 0.97 <= r.speedup <= 1.03, t


def _hangs_after_12(data_dir) -> str:
    return (data_dir / "cand_wrong_after_12.py").read_text().replace("return y + 1.0 if self.calls > 12 else y", """if self.calls > 12:
            import time
            while True:
                time.sleep(0.1)
        return y""")


def test_a_call_that_hangs_in_a_round_written_ahead_is_still_ended_at_its_bound(monkeypatch, tmp_path, task, data_dir,
                                                                              build_pool):
    start = time.monotonic()
    hangs = _hangs_after_12(data_dir)
    assert "while True" in hangs
    r, lines = _traced(monkeypatch, tmp_path, task, as_candidate(hangs), build_pool,
                       {GO_FIRST_ENV: "1", ROUND_WRITE_ENV: "1"}, correctness_block=False,
                       min_call_timeout_s=1.0, first_call_timeout_s=2.0)
    assert r.verdict is Verdict.TIMEOUT, (r.verdict, r.detail)
    assert time.monotonic() - start < 60
    assert any("wrote" in x for x in lines)  # it hung in a round written ahead


@pytest.mark.parametrize("setting, seconds", [("", DEFAULT_JUDGE_SPIN_US / 1e6), (" ", DEFAULT_JUDGE_SPIN_US / 1e6),
                                              ("0", 0.0), ("250", 250e-6), ("1e3", 1e-3)])
def test_judge_spin_setting(setting, seconds):
    assert judge_spin_s(setting, "cuda") == pytest.approx(seconds)
    assert judge_spin_s(setting, "cpu") == 0.0  # it would take a core from the calls it times


@pytest.mark.parametrize("setting", ["fast", "-1", "2e6", "nan"])
def test_a_bad_judge_spin_setting_says_what_is_expected(setting):
    with pytest.raises(ValueError, match=JUDGE_SPIN_ENV):
        judge_spin_s(setting, "cuda")


@pytest.fixture
def pair():
    ours, theirs = socket.socketpair()
    conn = Connection(ours.detach())
    peer = Connection(theirs.detach())
    yield conn, peer
    conn.close()
    peer.close()


def _send_later(peer: Connection, delay_s: float, msg: dict) -> threading.Thread:
    def run() -> None:
        time.sleep(delay_s)
        framing.send_json(peer, msg)

    t = threading.Thread(target=run)
    t.start()
    return t


def test_a_reply_within_the_spin_is_read(pair):
    conn, peer = pair
    t = _send_later(peer, 0.01, {"op": "round", "r": 1})
    assert framing.recv_json(conn, 5.0, spin_s=1.0) == {"op": "round", "r": 1}
    t.join()


def test_a_reply_after_the_spin_is_read_by_the_blocking_wait(pair):
    conn, peer = pair
    t = _send_later(peer, 0.2, {"op": "round", "r": 2})
    start = time.monotonic()
    assert framing.recv_json(conn, 5.0, spin_s=0.01) == {"op": "round", "r": 2}
    assert time.monotonic() - start >= 0.15
    t.join()


@pytest.mark.parametrize("spin_s", [0.05, 5.0])
def test_no_reply_times_out_at_the_timeout_whatever_the_spin(pair, spin_s):
    """The spin is part of the wait, never added to it: a spin longer than the timeout ends at the timeout."""
    conn, _ = pair
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        framing.recv_json(conn, 0.2, spin_s=spin_s)
    assert 0.15 <= time.monotonic() - start < 2.5  # far below the 5 s spin (room for a loaded machine)


def test_the_reference_skips_its_poisoning_unless_asked_and_the_evidence_says_so(monkeypatch, tmp_path, task, data_dir,
                                                                                build_pool):
    """By default the reference worker, which runs no candidate code, does not poison its free memory;
    REFERENCE_POISON_ENV=1 makes it. The candidate's poisoning is the operator's POISON_ENV either way
    (here 1, a CPU's heap poisoner), and the evidence names both."""
    monkeypatch.setenv("EVALFARM_WORKER_POISON", "1")
    r, _ = _traced(monkeypatch, tmp_path, task, as_candidate(str(data_dir / "cand_same.py")), build_pool, {})
    assert r.verdict is Verdict.OK, r.detail
    assert any("reference worker's free memory not poisoned" in note for note in r.evidence.isolation), \
        r.evidence.isolation
    assert any("free memory poisoned" in note for note in r.evidence.isolation), r.evidence.isolation
    (tmp_path / "on").mkdir()
    r2, _ = _traced(monkeypatch, tmp_path / "on", task, as_candidate(str(data_dir / "cand_same.py")), build_pool,
                    {REFERENCE_POISON_ENV: "1"})
    assert r2.verdict is Verdict.OK, r2.detail
    assert not any("reference worker's free memory" in note for note in r2.evidence.isolation)
