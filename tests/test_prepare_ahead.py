"""Preparation ahead (judge.PREPARE_AHEAD_ENV): a worker prepares its next call right after replying
for the last one, and the judge sends a lone call's round with "go", without a "prepare" round trip.

Read from the round trace (evalfarm.judge.round_trace), which records which exchanges began with a
"prepare" of their own. Warm calls are off here (as on a GPU by default): a round with a warm call
always begins with its own "prepare"."""

from __future__ import annotations

import pytest
from traced_scoring import traced_score

from evalfarm import ScoreConfig, Verdict
from evalfarm.judge.exchange import PREPARE_AHEAD_ENV
from evalfarm.scoring import as_candidate, as_task

# Preparation ahead is a lone call's: these tests time lone calls.
QUICK = ScoreConfig(num_correctness_inputs=40, timing_budget_s=0.5, min_timed_rounds=20, warm_call=False,
                    timing_protocol="lone")


def _traced(monkeypatch, tmp_path, task, candidate, build_pool, ahead: str | None, **changes):
    env = {} if ahead is None else {PREPARE_AHEAD_ENV: ahead}
    return traced_score(monkeypatch, tmp_path, task, candidate, build_pool, QUICK.replace(**changes), env)


@pytest.fixture(scope="module")
def task(data_dir):
    return as_task(str(data_dir / "task_scale.py"))


def test_lone_calls_skip_the_prepare_round_trip(monkeypatch, tmp_path, task, data_dir, build_pool):
    r, lines = _traced(monkeypatch, tmp_path, task, as_candidate(str(data_dir / "cand_same.py")), build_pool, None)
    assert r.verdict is Verdict.OK, r.detail
    assert 0.5 < r.speedup < 2.0
    for role in ("reference", "candidate"):
        mine = [x for x in lines if x["role"] == role]
        # The first exchange prepares as before; every one that replied prepares the next call.
        assert "prepare_us" in mine[0] and all("ahead_us" in x for x in mine)
        lone_after_first = [x for x in mine[1:] if not x["block"]]
        assert lone_after_first, "the evaluation had no lone calls after its first"
        assert not any("prepare_us" in x for x in lone_after_first), [x for x in lone_after_first if "prepare_us" in x][:2]
        # A block still starts with its own prepare_block.
        assert all("prepare_us" in x for x in mine if x["block"])
    # The judge waits for a quiet GPU before a reference call prepared ahead: on a GPU only.
    assert not any("judge_quiet_us" in x for x in lines)
    assert r.evidence.timing.rounds >= QUICK.min_timed_rounds


def test_the_operator_can_turn_it_off(monkeypatch, tmp_path, task, data_dir, build_pool):
    r, lines = _traced(monkeypatch, tmp_path, task, as_candidate(str(data_dir / "cand_same.py")), build_pool, "0")
    assert r.verdict is Verdict.OK, r.detail
    assert all("prepare_us" in x and "ahead_us" not in x for x in lines)


def test_warm_calls_still_prepare_after_their_warm_call(monkeypatch, tmp_path, task, data_dir, build_pool):
    r, lines = _traced(monkeypatch, tmp_path, task, as_candidate(str(data_dir / "cand_same.py")), build_pool, None,
                       warm_call=True)
    assert r.verdict is Verdict.OK, r.detail
    warm = [x for x in lines if "warm_us" in x]
    assert warm and all("prepare_us" in x for x in warm)
    assert r.evidence.timing.warm_call_rounds > 0


def test_wrong_outputs_are_still_caught_with_calls_prepared_ahead(monkeypatch, tmp_path, task, data_dir, build_pool):
    wrong = str(data_dir / "cand_wrong_after_12.py")
    r, lines = _traced(monkeypatch, tmp_path, task, as_candidate(wrong), build_pool, None, correctness_block=False)
    assert r.verdict is Verdict.INCORRECT, (r.verdict, r.detail)
    assert any("ahead_us" in x and "prepare_us" not in x for x in lines if x["role"] == "candidate")


@pytest.mark.gpu
def test_on_a_gpu_the_judge_waits_for_quiet_and_an_identical_copy_scores_one(monkeypatch, tmp_path, data_dir,
                                                                           build_pool):
    """The judge's own quiet wait replaces the reference worker's for calls prepared ahead, and both
    workers' calls still follow the same steps: their pre-call times match, and a copy of the
    reference scores 1.00 (a wait placed between the reference's flush and its call scored 0.94)."""
    relu = as_task(str(data_dir / "gpu" / "task_relu.py"))
    r, lines = _traced(monkeypatch, tmp_path, relu, as_candidate(str(data_dir / "gpu" / "cand_same.py")), build_pool,
                       None, device="cuda", num_correctness_inputs=200, timing_budget_s=5.0, min_timed_rounds=70)
    assert r.verdict is Verdict.OK, r.detail
    ref = [x for x in lines[2:] if x["role"] == "reference" and not x["block"]]
    assert ref and all("judge_quiet_us" in x and "prepare_us" not in x for x in ref)
    t = r.evidence.timing
    assert abs(t.pre_call_cand_us_median - t.pre_call_ref_us_median) < 0.2 * t.pre_call_ref_us_median, t
    assert 0.97 <= r.speedup <= 1.03, t
