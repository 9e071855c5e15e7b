"""The outlier re-verification rule (evalfarm.reverify), shared by local scoring and the client."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evalfarm import reverify
from evalfarm.result import Evidence, ScoreResult, TimingEvidence
from evalfarm.timing import conservative_round
from evalfarm.verdict import Verdict


def ok(raw: float) -> ScoreResult:
    return ScoreResult(verdict=Verdict.OK, speedup=conservative_round(raw),
                       evidence=Evidence(timing=TimingEvidence(raw_speedup=raw)))


def failed(verdict: Verdict, detail: str = "boom") -> ScoreResult:
    return ScoreResult.failure(verdict, detail)


@pytest.mark.parametrize(("score", "above", "best", "expect"), [
    (3.01, 3.0, None, True),
    (3.0, 3.0, None, False),  # "> 3", not ">= 3"
    (2.9, 3.0, None, False),
    (2.1, 3.0, 1.0, True),  # > 2x the best seen for the task
    (2.0, 3.0, 1.0, False),
    (2.1, 3.0, 0.0, False),  # no meaningful best
    (50.0, 0.0, 1.0, False),  # 0 disables re-verification altogether
    (5.0, 10.0, None, False),
    (5.0, 10.0, 2.0, True),
])
def test_needs_reverification(score: float, above: float, best: float | None, expect: bool) -> None:
    assert reverify.needs_reverification(ok(score), above=above, best=best) is expect


@pytest.mark.parametrize("verdict", [v for v in Verdict if v is not Verdict.OK])
def test_only_ok_scores_are_reverified(verdict: Verdict) -> None:
    assert not reverify.needs_reverification(failed(verdict), above=0.5, best=0.1)


def test_constants_match_the_design_and_the_config_default() -> None:
    from evalfarm.config import ScoreConfig

    assert (reverify.REVERIFY_ABOVE, reverify.REVERIFY_FACTOR, reverify.AGREEMENT) == (3.0, 2.0, 0.10)
    assert ScoreConfig().reverify_above == reverify.REVERIFY_ABOVE


# (first raw, second raw, status, kept raw): agreement is on raw speedups, the lower is kept otherwise
MERGES = [
    (5.0, 5.3, "agreed", 5.0),
    (5.0, 4.5, "agreed", 5.0),  # exactly 10% below
    (5.0, 5.5, "agreed", 5.0),  # exactly 10% above
    (5.0, 5.51, "disagreed", 5.0),  # second higher: the first (lower) stays
    (5.0, 4.49, "disagreed", 4.49),
    (8.0, 1.1, "disagreed", 1.1),
    (22.004, 21.0, "agreed", 22.004),
    # rounded scores would agree (3.31 vs 3.01: within 10%) but the raw ones do not
    (3.0149, 3.3199, "disagreed", 3.0149),
]


@pytest.mark.parametrize(("s1", "s2", "status", "kept_raw"), MERGES)
def test_merge_of_two_ok_measurements(s1: float, s2: float, status: str, kept_raw: float) -> None:
    first, second = ok(s1), ok(s2)
    before = copy.deepcopy((first, second))
    out = reverify.merge(first, second, where="w", info={"host": "h2"})
    assert (first, second) == before  # inputs untouched
    assert out.verdict is Verdict.OK
    assert out.speedup == conservative_round(kept_raw)
    assert out.evidence.timing is not None and out.evidence.timing.raw_speedup == kept_raw
    rv = out.evidence.reverified
    assert rv == {"status": status, "agreed": status == "agreed", "first_speedup": s1, "speedup": s2,
                  "tolerance": 0.10, "where": "w", "verdict": "OK", "correctness_inputs": 0, "seconds": None,
                  "host": "h2"}
    if status == "disagreed":
        assert "re-verification disagreed" in out.detail and "reporting the lower" in out.detail
        assert any("reporting the lower" in g for g in out.evidence.guards)
    else:
        assert out.detail == "" and out.evidence.guards == []


@pytest.mark.parametrize("verdict", [Verdict.INCORRECT, Verdict.TIMEOUT, Verdict.HACK_DETECTED,
                                     Verdict.RUNTIME_ERROR, Verdict.CUDA_FAULT])
def test_a_failing_second_run_replaces_the_first(verdict: Verdict) -> None:
    out = reverify.merge(ok(6.0), failed(verdict, "wrong output"), where="another daemon")
    assert out.verdict is verdict and out.speedup is None
    assert out.detail.startswith("first run scored 6x but the re-measurement (another daemon) failed")
    assert out.detail.endswith("wrong output")
    assert out.evidence.reverified["status"] == "failed" and out.evidence.reverified["verdict"] == verdict.value
    assert out.evidence.reverified["agreed"] is False


@pytest.mark.parametrize("second", [failed(Verdict.INFRA_ERROR, "deadline exceeded"),
                                    ScoreResult(verdict=Verdict.OK, speedup=None)])
def test_a_second_run_that_could_not_run_keeps_the_first_marked(second: ScoreResult) -> None:
    out = reverify.merge(ok(22.3456), second, where="same daemon")
    assert out.verdict is Verdict.OK and out.speedup == 22.34
    rv = out.evidence.reverified
    assert rv["status"] == "not_reverified" and rv["agreed"] is False and rv["speedup"] is None
    assert "not re-verified" in out.detail
    assert any("not re-verified" in g for g in out.evidence.guards)


@given(st.floats(0.05, 1e4), st.floats(0.05, 1e4))
def test_merge_properties(s1: float, s2: float) -> None:
    out = reverify.merge(ok(s1), ok(s2), where="w")
    rv = out.evidence.reverified
    assert out.verdict is Verdict.OK
    assert rv["agreed"] is (abs(s2 - s1) <= 0.10 * s1)
    # never above either measurement's rounded score; the first one when they agree
    assert out.speedup <= max(conservative_round(s1), conservative_round(s2))
    if rv["agreed"]:
        assert out.speedup == conservative_round(s1)
    else:
        assert out.speedup == conservative_round(min(s1, s2))
    # rounding happens once: merging the merged result with itself changes nothing
    again = reverify.merge(out, out, where="w")
    assert again.speedup == out.speedup


@given(st.floats(0.01, 1e4), st.floats(0.0, 100.0), st.one_of(st.none(), st.floats(0.0, 1e4)))
def test_needs_reverification_properties(score: float, above: float, best: float | None) -> None:
    got = reverify.needs_reverification(ok(score), above=above, best=best)
    s = conservative_round(score)
    expect = above > 0 and (s > above or (best is not None and best > 0 and s > 2.0 * best))
    assert got is expect


def test_the_second_measurement_checks_at_most_its_own_share_of_correctness_inputs():
    from evalfarm.config import ScoreConfig
    from evalfarm.reverify import REVERIFY_CORRECTNESS_INPUTS, second_config

    first = ScoreConfig(num_correctness_inputs=1000, timing_budget_s=7.0, reverify_above=2.5)
    second = second_config(first)
    assert second.num_correctness_inputs == REVERIFY_CORRECTNESS_INPUTS < 1000
    assert second.replace(num_correctness_inputs=1000) == first  # nothing else changes
    assert second_config(first.replace(num_correctness_inputs=20)).num_correctness_inputs == 20


def test_a_daemon_runs_a_re_measurement_request_with_the_second_measurement_s_options():
    from evalfarm.server.validate import TaskResolver, prepare
    from evalfarm.v1 import evalfarm_pb2 as pb

    def request(reverification: bool) -> pb.ScoreRequest:
        return pb.ScoreRequest(task=pb.TaskRef(name="L1/1"), reverification=reverification,
                               candidate=pb.Candidate(source=b"class ModelNew: ...", sample_id="s"),
                               options=pb.ScoreOptions(num_correctness_inputs=1000, timing_budget_s=3.0))

    ordinary = prepare(request(False), TaskResolver(None), 1 << 20).config
    second = prepare(request(True), TaskResolver(None), 1 << 20).config
    assert ordinary.num_correctness_inputs == 1000
    assert second == reverify.second_config(ordinary)
    assert second.num_correctness_inputs == reverify.REVERIFY_CORRECTNESS_INPUTS
