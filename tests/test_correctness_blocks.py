"""Correctness blocks (ScoreConfig.correctness_block): the correctness rounds after the warm-up run
a batch per worker exchange, are checked like any round, and are never timed."""

from __future__ import annotations

import re
import time

import pytest

from evalfarm import ScoreConfig, Verdict
from evalfarm.config import ConfigError
from evalfarm.judge.blame import Verdicted
from evalfarm.judge.correctness import BLOCK_NOTE, BlockLog, correctness_block_rounds
from evalfarm.judge.rounds import block_results, check_round_result
from evalfarm.scoring import as_candidate, as_task, score

# 40 correctness inputs, 5 warm-up rounds: rounds 5..39 run in blocks (at most 32 per batch here).
# Warm calls off: these tests name the candidate's N-th call, which a warm call would shift.
QUICK = ScoreConfig(num_correctness_inputs=40, timing_budget_s=1.0, min_timed_rounds=35, warm_call=False)
IN_BLOCKS = QUICK.num_correctness_inputs - QUICK.warmup_rounds


@pytest.fixture(scope="module")
def task(data_dir):
    return as_task(str(data_dir / "task_scale.py"))


def _odd_call(data_dir, mode: str, at_call: int, sleep_s: float = 0.0):
    """cand_odd_call.py with its MODE, AT_CALL and SLEEP_S set."""
    source = (data_dir / "cand_odd_call.py").read_text()
    for old, new in (('MODE = "wrong"', f"MODE = {mode!r}"), ("AT_CALL = 10", f"AT_CALL = {at_call}"),
                     ("SLEEP_S = 0.0", f"SLEEP_S = {sleep_s!r}")):
        assert old in source
        source = source.replace(old, new)
    return as_candidate(source)


def _score(task, candidate, build_pool, **changes):
    return score(task, candidate, QUICK.replace(**changes), build_pool=build_pool)


@pytest.mark.parametrize("blocks", [True, False])
def test_an_honest_candidate_is_ok_with_blocks_on_and_off(task, data_dir, build_pool, blocks):
    r = _score(task, as_candidate(str(data_dir / "cand_same.py")), build_pool, correctness_block=blocks)
    assert r.verdict is Verdict.OK, r.detail
    assert 0.5 < r.speedup < 2.0
    t = r.evidence.timing
    assert t.rounds >= QUICK.min_timed_rounds and t.audited_rounds >= QUICK.num_correctness_inputs, t
    assert r.evidence.correctness_inputs == QUICK.num_correctness_inputs
    # Every correctness round after the warm-up ran in a block: a batch ends where correctness does.
    assert t.block_rounds == (IN_BLOCKS if blocks else 0), t
    assert (BLOCK_NOTE in r.evidence.isolation) is blocks, r.evidence.isolation
    if blocks:  # how the blocks went, per worker: evidence for the diagnosis, not the score
        b = t.blocks
        assert b["count"] == b["blocks_reference_first"] + b["blocks_candidate_first"] >= 2, b
        assert b["call_us_reference"] > 0 and b["call_us_candidate"] > 0 and b["leftover_us_candidate"] > 0, b
    else:
        assert t.blocks is None, t
    ph = r.evidence.phases_s
    assert 0 < ph["rounds_calls"] <= ph["rounds_exchange"], ph
    assert 0 <= ph["rounds_poison"] <= ph["rounds_prepare"], ph  # poisoning is off on a CPU by default


@pytest.mark.parametrize("blocks", [True, False])
def test_a_wrong_output_in_the_middle_of_a_block_names_its_input(task, data_dir, build_pool, blocks):
    # Call 20 is round 19, in the middle of the block of rounds 5..36.
    r = _score(task, _odd_call(data_dir, "wrong", 20), build_pool, correctness_block=blocks)
    assert r.verdict is Verdict.INCORRECT, (r.verdict, r.detail)
    assert r.detail.startswith("correctness input 20 of 40:"), r.detail


@pytest.mark.parametrize("blocks", [True, False])
def test_a_wrong_structure_in_a_block_gets_the_same_verdict_as_without(task, data_dir, build_pool, blocks):
    r = _score(task, _odd_call(data_dir, "shape", 12), build_pool, correctness_block=blocks)
    assert r.verdict is Verdict.INCORRECT, (r.verdict, r.detail)
    assert r.detail == "output 0 has shape (8191,), expected (8192,)", r.detail


def test_a_call_that_hangs_in_a_block_is_a_timeout(task, data_dir, build_pool):
    # Rounds 1..3 form one block; the candidate's third call (round 2, the block's second) never
    # returns. The worker reports each call of a block as it ends, so the judge waits only the
    # per-call bound plus slack for the hung one, then kills the candidate.
    t0 = time.monotonic()
    r = _score(task, _odd_call(data_dir, "sleep", 3, 3600.0), build_pool, num_correctness_inputs=4,
               warmup_rounds=1, min_call_timeout_s=0.1, first_call_timeout_s=1.0)
    assert r.verdict is Verdict.TIMEOUT, (r.verdict, r.detail)
    # Ended at the hung call's own bound, not the block's: the worker reports each call as it ends.
    # The bound is the first-call allowance (1 s) plus 1000x the reference's call (about 1 ms,
    # more on a loaded machine), so its last digits vary; the block's would be three times that.
    m = re.search(r"did not finish correctness round 2 \(call 2 of a block of 3, at most ([0-9.]+) s\) within ([0-9.]+) s",
                  r.detail)
    assert m and m[1] == m[2] and 1.1 <= float(m[1]) < 4.0, r.detail
    assert time.monotonic() - t0 < 30


def test_a_call_over_its_bound_in_a_block_is_a_timeout_by_its_reported_time(task, data_dir, build_pool):
    # The block as a whole finishes inside its bound, but one of its calls took longer than one
    # call may: the worker's report of that call decides, as for a lone call. The bound is
    # max(0.3 s, timeout_factor x the reference's estimated call); with the default factor (1000)
    # a reference estimate of 0.8 ms (its first calls on a loaded machine) would lift it past the call.
    r = _score(task, _odd_call(data_dir, "sleep", 3, 0.8), build_pool, num_correctness_inputs=4,
               warmup_rounds=1, min_call_timeout_s=0.3, first_call_timeout_s=1.0, timeout_factor=100.0)
    assert r.verdict is Verdict.TIMEOUT, (r.verdict, r.detail)
    assert r.detail.startswith("correctness round 2 (in a block): a call took"), r.detail
    assert "per-call bound of 0.3 s" in r.detail, r.detail


def test_the_score_is_timed_only_after_correctness(task, data_dir, build_pool):
    # Every correctness call sleeps 30 ms (1.2 s in all, more than the 1 s timing budget); the
    # calls after correctness are honest. With blocks the score's rounds all come after
    # correctness; the budget is used up by then, but the minimum rounds are still timed.
    slow = _odd_call(data_dir, "slow_until", QUICK.num_correctness_inputs, 0.03)
    r = _score(task, slow, build_pool)
    assert r.verdict is Verdict.OK, r.detail
    t = r.evidence.timing
    assert t.block_rounds == IN_BLOCKS and t.rounds >= QUICK.min_timed_rounds, t
    assert t.cand_time_us_median < 10_000, t
    assert r.evidence.phases_s["correctness"] > 1.2, r.evidence.phases_s
    # Without either kind of block the same correctness rounds are timed, and they make the median.
    r = _score(task, slow, build_pool, correctness_block=False, timing_protocol="lone")
    assert r.verdict is Verdict.OK, r.detail
    assert r.evidence.timing.block_rounds == 0 and r.evidence.timing.cand_time_us_median > 25_000, r.evidence.timing


@pytest.mark.long  # four evaluations of 48 MiB rounds (the arena budget must hold fewer than 8)
def test_block_size_rule_when_few_rounds_fit_a_batch(data_dir, build_pool):
    # 12M floats in and out per call: the CPU's 256 MiB arena budget holds fewer than
    # MIN_BLOCK_ROUNDS rounds per batch. With one call per exchange for the timed rounds (lone),
    # every correctness round is one call per exchange too (its times are samples); with timed
    # blocks (4 rounds per batch, as a timed block wants) the correctness rounds, never samples
    # there, run in blocks all the same. Either way every output is checked.
    big = 3 << 22
    task = as_task((data_dir / "task_scale.py").read_text().replace("n = 8192", f"n = {big}"))
    cfg = dict(num_correctness_inputs=6, warmup_rounds=2, timing_budget_s=0.3, min_timed_rounds=7)
    honest = as_candidate((data_dir / "cand_same.py").read_text().replace("8192", str(big)))
    wrong = as_candidate((data_dir / "cand_odd_call.py").read_text().replace("8192", str(big))
                         .replace("AT_CALL = 10", "AT_CALL = 5"))
    r = _score(task, honest, build_pool, timing_protocol="lone", **cfg)
    assert r.verdict is Verdict.OK, r.detail
    assert r.evidence.timing.block_rounds == 0 and r.evidence.timing.rounds >= 1, r.evidence.timing
    assert BLOCK_NOTE not in r.evidence.isolation, r.evidence.isolation
    r = _score(task, wrong, build_pool, timing_protocol="lone", **cfg)
    assert r.verdict is Verdict.INCORRECT and r.detail.startswith("correctness input 5 of 6:"), r.detail
    r = _score(task, honest, build_pool, **cfg)
    assert r.verdict is Verdict.OK, r.detail
    assert r.evidence.timing.block_rounds == 4 and r.evidence.timing.rounds >= 1, r.evidence.timing
    assert BLOCK_NOTE in r.evidence.isolation, r.evidence.isolation
    r = _score(task, wrong, build_pool, **cfg)
    assert r.verdict is Verdict.INCORRECT and r.detail.startswith("correctness input 5 of 6:"), r.detail


# --- the protocol, without workers -------------------------------------------------------


def _round(r: int, t: int = 1000, pre: int = 10) -> dict:
    return {"r": r, "t": t, "e": None, "pre": pre, "strides": [[1]]}


def test_a_block_reply_must_answer_exactly_the_rounds_sent():
    sent = [5, 6, 7]
    assert block_results({"op": "block", "rounds": [_round(5), _round(6), _round(7)]}, sent)[2]["r"] == 7
    bad = [
        {"op": "block", "rounds": [_round(5), _round(7), _round(6)]},  # out of order
        {"op": "block", "rounds": [_round(5), _round(6), _round(8)]},  # a round not sent
        {"op": "block", "rounds": [_round(5), _round(6)]},  # one missing
        {"op": "block", "rounds": [_round(5), _round(6), _round(7), _round(8)]},  # one more
        {"op": "block", "rounds": [_round(5), _round(6), _round(7, t=0)]},  # no call time
        {"op": "block", "rounds": [_round(5), _round(6, pre=-1), _round(7)]},  # negative pre-call time
        {"op": "block", "rounds": [_round(5), {**_round(6), "r": True}, _round(7)]},  # not an integer
        {"op": "block", "rounds": [_round(5), "6", _round(7)]},
        {"op": "block", "rounds": {"5": _round(5)}},
        {"op": "block"},
    ]
    for reply in bad:
        with pytest.raises(Verdicted) as err:
            block_results(reply, sent)
        assert err.value.verdict is Verdict.HACK_DETECTED and "guard worker_protocol" in err.value.detail, reply


def test_a_lone_call_result_is_checked_the_same_way():
    check_round_result(_round(3), 3)
    for res in (_round(4), _round(3, t=-5), {"r": 3, "t": 1.5, "pre": 0}, None):
        with pytest.raises(Verdicted) as err:
            check_round_result(res, 3)
        assert err.value.verdict is Verdict.HACK_DETECTED


def test_which_rounds_run_in_blocks():
    assert correctness_block_rounds(ScoreConfig()) == range(5, 1000)
    assert correctness_block_rounds(ScoreConfig(warmup_rounds=0, num_correctness_inputs=10)) == range(1, 10)
    assert not correctness_block_rounds(ScoreConfig(warmup_rounds=5, num_correctness_inputs=3))
    assert not correctness_block_rounds(ScoreConfig(correctness_block=False))


def test_the_option_is_a_bool_on_the_cli_and_the_wire():
    from evalfarm.cli import build_parser
    from evalfarm.client.wire import config_from_pb, options_to_pb
    from evalfarm.score_options import local_config

    def config(*flags: str) -> ScoreConfig:
        return local_config(build_parser().parse_args(["score", "--task", "t", "--candidate", "c", *flags]))

    assert config().correctness_block is True
    assert config("--no-correctness-block").correctness_block is False
    assert config("--correctness-block").correctness_block is True
    for value in (True, False):
        assert config_from_pb(options_to_pb({"correctness_block": value}), "cpu").correctness_block is value
    assert config_from_pb(options_to_pb({}), "cpu").correctness_block is True
    with pytest.raises(ConfigError, match="correctness_block"):
        ScoreConfig(correctness_block=1)  # type: ignore[arg-type]


def test_the_block_log_summarises_per_worker_and_by_order():
    log = BlockLog()
    assert log.summary() is None
    # Two blocks of 4 rounds with the reference first, one with the candidate first; the
    # reference's calls take 2x the candidate's in the first order and 1x in the other.
    log.add("reference", 4, {"reference": 8000, "candidate": 4000}, {"reference": 40_000, "candidate": 44_000})
    log.add("reference", 4, {"reference": 8000, "candidate": 4000}, {"reference": 40_000, "candidate": 44_000})
    log.add("candidate", 4, {"reference": 4000, "candidate": 4000}, {"reference": 40_000, "candidate": 40_000})
    s = log.summary()
    assert s["count"] == 3 and s["blocks_reference_first"] == 2 and s["blocks_candidate_first"] == 1
    assert s["call_us_reference"] == 2.0 and s["call_us_candidate"] == 1.0
    assert s["leftover_us_reference"] == 10.0 and s["leftover_us_candidate"] == 11.0
    assert s["ref_over_cand_reference_first"] == 2.0 and s["ref_over_cand_candidate_first"] == 1.0


def test_a_block_whose_reference_rounds_were_kept_gives_the_candidate_s_figures_only():
    log = BlockLog()
    log.add("candidate", 4, {"candidate": 4000}, {"candidate": 40_000})
    log.add("candidate", 4, {"candidate": 8000}, {"candidate": 40_000})
    s = log.summary()
    assert s["count"] == 2 and s["call_us_candidate"] == 1.5 and s["leftover_us_candidate"] == 10.0
    assert s["call_us_reference"] is None and s["leftover_us_reference"] is None
    assert s["ref_over_cand_candidate_first"] is None and s["blocks_candidate_first"] == 0
