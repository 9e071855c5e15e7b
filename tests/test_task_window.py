"""Task windows (evalfarm.judge.task_window): one judge serves several candidates of one task,
making the task's set-up once; fresh workers and inputs for every candidate."""

from __future__ import annotations

import threading

import pytest

from evalfarm import ScoreConfig, Verdict
from evalfarm.judge.inputs import InputSource
from evalfarm.judge.standby import JudgeProcess, WarmJudges
from evalfarm.judge.task_window import (
    WindowSpec,
    WindowSpecError,
    WindowState,
    request_key,
    window_key,
)
from evalfarm.scoring import as_candidate, as_task, score
from evalfarm.server.config import ServerConfig, ServerConfigError
from tests.service.conftest import descendants, process_state, wait_until

# No re-verification: an OK score above 3 would take a turn of a window and move the indices read here.
QUICK = ScoreConfig(num_correctness_inputs=20, timing_budget_s=0.3, min_timed_rounds=21, reverify_above=0.0)


def test_a_window_spec_is_checked_and_one_candidate_is_no_window():
    assert WindowSpec(8, 10.0).enabled and not WindowSpec(1, 10.0).enabled
    for bad in (dict(max_candidates=0), dict(max_candidates=True), dict(idle_s=0.0), dict(idle_s=7200.0)):
        with pytest.raises(WindowSpecError):
            WindowSpec(**bad)
    assert WindowSpec.from_request({"window": {"max_candidates": 4, "idle_s": 5}}) == WindowSpec(4, 5.0)
    for raw in (None, {"max_candidates": 1}, {"max_candidates": "x"}, {"max_candidates": -3}, "8"):
        assert WindowSpec.from_request({"window": raw}) is None


def test_the_key_changes_with_the_task_its_profiles_and_every_setting():
    base = window_key("class Model: ...", {"small": {"n": 4}}, {"device": "cpu", "num_correctness_inputs": 20})
    assert base == window_key("class Model: ...", {"small": {"n": 4}}, {"num_correctness_inputs": 20, "device": "cpu"})
    assert base != window_key("class Model: ... ", {"small": {"n": 4}}, {"device": "cpu", "num_correctness_inputs": 20})
    assert base != window_key("class Model: ...", {"small": {"n": 8}}, {"device": "cpu", "num_correctness_inputs": 20})
    assert base != window_key("class Model: ...", {"small": {"n": 4}}, {"device": "cpu", "num_correctness_inputs": 21})
    request = {"task_source": "t", "size_profiles": {}, "config": {"device": "cpu"}, "candidate_source": "a"}
    # The candidate is not part of it; a correctness-only check (other sizes) never shares a set-up.
    assert request_key(request) == request_key({**request, "candidate_source": "b"})
    assert request_key(request) != request_key({**request, "correctness_only": True})
    # How many correctness inputs a candidate gets is its own evaluation's (a re-measurement has
    # fewer: evalfarm.reverify.second_config); every other setting is the set-up's.
    n1000 = {**request, "config": {"device": "cpu", "num_correctness_inputs": 1000}}
    assert request_key(n1000) == request_key({**request, "config": {"device": "cpu", "num_correctness_inputs": 100}})
    assert request_key(n1000) != request_key({**request, "config": {"device": "cpu", "num_correctness_inputs": 1000,
                                                                     "timing_budget_s": 2.0}})
    state = WindowState(WindowSpec(3, 5.0), request_key(request))
    assert state.next_request_fits({**request, "candidate_source": "c"})
    assert not state.next_request_fits({**request, "task_source": "u"})
    assert state.continues(False) and not state.continues(True)
    state.index = 3
    assert not state.continues(False)  # full


def test_a_fresh_source_draws_other_inputs_from_the_same_task(data_dir):
    import torch

    from evalfarm.tasks.format import instantiate_task

    task = as_task(str(data_dir / "task_scale.py"))
    module = instantiate_task(task, task.resolve_profile("default", "cpu"))
    first = InputSource(module, "cpu")
    fresh = first.fresh()
    assert fresh.module is first.module
    assert torch.equal(first.inputs(0)[0], first.inputs(0)[0])  # a source repeats its own draws
    assert not torch.equal(first.inputs(0)[0], fresh.inputs(0)[0])
    assert not torch.equal(first.inputs(7)[0], fresh.inputs(7)[0])


def _pids_of(judges: WarmJudges) -> list[int]:
    return [j.proc.pid for q in judges._parked.values() for j in q]


def test_a_window_serves_a_task_s_candidates_with_one_set_up_and_fresh_workers(data_dir, build_pool):
    task = as_task(str(data_dir / "task_scale.py"))
    judges = WarmJudges({}, window=WindowSpec(3, 30.0))
    results, worker_sets = [], []
    try:
        for name in ("cand_same.py", "cand_wrong.py", "cand_fast.py", "cand_same.py"):
            results.append(score(task, as_candidate(str(data_dir / name)), QUICK, build_pool, judges=judges))
            parked = _pids_of(judges)
            if parked:  # the judge starts the next candidate's workers at once
                assert wait_until(lambda p=parked[0]: len(descendants(p)) >= 2, 60), "no fresh workers"
            worker_sets.append({p for judge in parked for p in descendants(judge)})
        stats = judges.stats()
    finally:
        judges.close()
    verdicts = [r.verdict for r in results]
    assert verdicts == [Verdict.OK, Verdict.INCORRECT, Verdict.OK, Verdict.OK], [r.detail for r in results]
    windows = [r.evidence.task_window for r in results]
    # Three candidates per window: the fourth starts a new judge, which makes the set-up again.
    assert [w["index"] for w in windows] == [1, 2, 3, 1]
    assert [w["shared_setup"] for w in windows] == [False, True, True, False]
    assert windows[1]["setup_spared_s"] > 0
    # A shared set-up skips the task's own steps (the reference built and called, the lint, the FLOPs).
    assert "setup_reference" in results[0].evidence.phases_s
    assert "setup_reference" not in results[1].evidence.phases_s
    # Both candidates of the window got the precision gate, each with its own ground truths.
    assert results[2].evidence.precision.get("applied") is True
    assert stats["window"] == 2
    # Between candidates the workers are new processes: no worker of one serves the next.
    assert worker_sets[0] and worker_sets[1] and not worker_sets[2]  # the third filled the window
    assert not (worker_sets[0] & worker_sets[1])
    # The next candidate's workers were started during each evaluation a candidate could follow
    # (serve.WindowHold), not during the one that filled the window.
    assert [w["next_workers_started_during"] for w in windows] == [True, True, False, True], windows


def test_with_the_early_start_off_the_next_workers_start_after_the_result(data_dir, build_pool, monkeypatch):
    monkeypatch.setenv("EVALFARM_WINDOW_EARLY_START", "0")
    task = as_task(str(data_dir / "task_scale.py"))
    judges = WarmJudges({}, window=WindowSpec(2, 30.0))
    try:
        first = score(task, as_candidate(str(data_dir / "cand_same.py")), QUICK, build_pool, judges=judges)
        parked = _pids_of(judges)
        assert parked and wait_until(lambda: len(descendants(parked[0])) >= 2, 60), "no fresh workers"
        second = score(task, as_candidate(str(data_dir / "cand_fast.py")), QUICK, build_pool, judges=judges)
    finally:
        judges.close()
    assert first.verdict is Verdict.OK and second.verdict is Verdict.OK, (first.detail, second.detail)
    # No worker was started during the first evaluation; the window went on with workers started
    # after its result, and the task's set-up shared.
    assert first.evidence.task_window["next_workers_started_during"] is False, first.evidence.task_window
    assert second.evidence.task_window["index"] == 2 and second.evidence.task_window["shared_setup"] is True


def test_a_parked_judge_leaves_after_its_idle_time_and_the_next_candidate_gets_a_new_one(data_dir, build_pool):
    task = as_task(str(data_dir / "task_scale.py"))
    judges = WarmJudges({}, window=WindowSpec(4, 1.0))
    try:
        first = score(task, as_candidate(str(data_dir / "cand_same.py")), QUICK, build_pool, judges=judges)
        parked = [j for q in judges._parked.values() for j in q]
        assert len(parked) == 1
        judge = parked[0]
        assert wait_until(lambda: judge.proc.poll() is not None, 30), "a parked judge outlived its window's idle time"
        assert judge.proc.returncode == 0
        second = score(task, as_candidate(str(data_dir / "cand_same.py")), QUICK, build_pool, judges=judges)
    finally:
        judges.close()
    assert first.verdict is Verdict.OK and second.verdict is Verdict.OK
    assert second.evidence.task_window["index"] == 1


def test_only_a_judge_the_pool_started_can_be_parked():
    judges = WarmJudges({}, window=WindowSpec(4, 30.0))
    judge = JudgeProcess("cpu", request_timeout_s=30.0)  # started by this thread: it dies with it
    try:
        assert not judges.park(judge, "k" * 64)
        assert wait_until(lambda: judge.proc.poll() is not None, 15)
        assert judges.stats()["parked"] == 0
    finally:
        judge.close()
        judges.close()


def test_without_a_window_nothing_is_parked(data_dir, build_pool):
    task = as_task(str(data_dir / "task_scale.py"))
    judges = WarmJudges({}, window=WindowSpec(1, 30.0))
    try:
        r = score(task, as_candidate(str(data_dir / "cand_same.py")), QUICK, build_pool, judges=judges)
        assert r.verdict is Verdict.OK and r.evidence.task_window == {}
        assert judges.stats()["parked"] == 0
    finally:
        judges.close()


def test_closing_the_pool_ends_its_parked_judges(data_dir, build_pool):
    task = as_task(str(data_dir / "task_scale.py"))
    judges = WarmJudges({}, window=WindowSpec(4, 60.0))
    closed = False
    try:
        score(task, as_candidate(str(data_dir / "cand_same.py")), QUICK, build_pool, judges=judges)
        parked = [j for q in judges._parked.values() for j in q]
        assert len(parked) == 1
        assert wait_until(lambda: len(descendants(parked[0].proc.pid)) >= 2, 60), "no fresh workers started"
        pids = [parked[0].proc.pid, *descendants(parked[0].proc.pid)]
        judges.close()
        closed = True
        assert wait_until(lambda: all(process_state(p) in (None, "Z") for p in pids), 15)
    finally:
        if not closed:
            judges.close()


def test_the_daemon_s_window_setting_is_checked_and_defaults_by_device():
    assert ServerConfig(devices=("cpu",)).task_window_candidates == 1
    assert ServerConfig(devices=("cuda:0",), gpu_names=("H100",), gpu_uuids=("",)).task_window_candidates == 16
    assert ServerConfig(devices=("cpu",), task_window=8).task_window_candidates == 8
    with pytest.raises(ServerConfigError, match="--task-window"):
        ServerConfig(task_window=0)
    with pytest.raises(ServerConfigError, match="--task-window-idle"):
        ServerConfig(task_window_idle_s=0.0)


def test_parked_judges_beyond_the_limit_are_closed_oldest_first():
    judges = WarmJudges({}, window=WindowSpec(4, 30.0), max_parked=1)
    made: list[JudgeProcess] = []
    done = threading.Event()

    def start_two() -> None:  # as the pool's own thread would (a judge dies with its starting thread)
        made.extend(JudgeProcess("cpu", request_timeout_s=30.0) for _ in range(2))
        done.wait(60)

    t = threading.Thread(target=start_two)
    t.start()
    try:
        assert wait_until(lambda: len(made) == 2, 30)
        judges._starter = t  # stand in for the pool's thread: these two were started by it
        assert judges.park(made[0], "a" * 64) and judges.park(made[1], "b" * 64)
        assert judges.stats()["parked"] == 1
        assert made[0]._closed and not made[1]._closed
        taken = judges.take("cpu", "b" * 64)
        assert taken is made[1] and judges.stats()["window"] == 1
    finally:
        done.set()
        for j in made:
            j.close()
        judges._closed = True
        t.join(10)


def test_a_parked_judge_forgets_the_worker_groups_its_judge_reaped():
    judge = object.__new__(JudgeProcess)  # the bookkeeping alone, without a process
    judge.worker_pgids = [11, 12, 13, 14]
    judge.ready = True
    JudgeProcess.park(judge, "k" * 64, 10.0, live=[13, 14])
    assert judge.worker_pgids == [13, 14]  # the next candidate's workers, still alive
    assert judge.window_key == "k" * 64 and not judge.ready
    JudgeProcess.park(judge, "k" * 64, 10.0, None)
    assert judge.worker_pgids == []


def test_a_re_measurement_is_served_by_the_window_s_judge_with_fewer_correctness_inputs(data_dir, build_pool):
    """An outlier's second measurement (evalfarm.reverify) runs in the window's judge, sharing the
    task's set-up, with fresh workers and its own, smaller set of correctness inputs."""
    from evalfarm.reverify import REVERIFY_CORRECTNESS_INPUTS

    task = as_task(str(data_dir / "task_scale.py"))
    n = REVERIFY_CORRECTNESS_INPUTS + 20
    judges = WarmJudges({}, window=WindowSpec(4, 30.0))
    try:
        r = score(task, as_candidate(str(data_dir / "cand_same.py")),
                  QUICK.replace(num_correctness_inputs=n, reverify_above=0.01), build_pool, judges=judges)
        stats = judges.stats()
    finally:
        judges.close()
    assert r.verdict is Verdict.OK, r.detail
    rv = r.evidence.reverified
    assert rv["status"] in ("agreed", "disagreed") and rv["correctness_inputs"] == REVERIFY_CORRECTNESS_INPUTS, rv
    kept_first = rv["status"] == "agreed" or rv["first_speedup"] <= rv["speedup"]
    assert r.evidence.correctness_inputs == (n if kept_first else REVERIFY_CORRECTNESS_INPUTS)
    assert stats["window"] == 1, stats  # the second measurement took the parked judge of the first
