"""An INFRA_ERROR's cause travels as a field (evalfarm.infra_cause) and alone decides the client's
retry and the slot's blame: the words of the detail decide nothing."""

from __future__ import annotations

import pytest

from evalfarm.client import FarmClient
from evalfarm.client.wire import result_from_pb, result_to_pb
from evalfarm.infra_cause import InfraCause, parse
from evalfarm.result import ScoreResult
from evalfarm.server.slot_health import is_slot_fault
from evalfarm.verdict import Verdict

from .conftest import FakeBackend, fake_source


def test_the_rule_table() -> None:
    assert [c.value for c in InfraCause if c.retried] == ["other", "draining"]
    assert [c.value for c in InfraCause if c.slots_fault] == ["other", "task_too_large"]
    assert parse("") is InfraCause.OTHER and parse("no such cause") is InfraCause.OTHER
    # Every INFRA_ERROR has a cause (other unless said); no other verdict has one.
    assert ScoreResult.failure(Verdict.INFRA_ERROR, "x").cause is InfraCause.OTHER
    assert ScoreResult.failure(Verdict.TIMEOUT, "x").cause is None
    assert ScoreResult.failure(Verdict.INFRA_ERROR, "x", infra_cause=InfraCause.DEADLINE).cause is InfraCause.DEADLINE


@pytest.mark.parametrize("cause", list(InfraCause))
def test_the_cause_crosses_the_wire_both_ways(cause: InfraCause) -> None:
    result = ScoreResult.failure(Verdict.INFRA_ERROR, "some words", infra_cause=cause)
    msg = result_to_pb(result, sample_id="s", host="h", gpu_name="")
    assert result_from_pb(msg).cause is cause  # through evidence_json
    msg.evidence_json = ""
    assert result_from_pb(msg).cause is cause  # through the structured fields alone


@pytest.mark.parametrize(("cause", "detail", "slots_fault"), [
    (InfraCause.OTHER, "deadline exceeded, in words only", True),
    (InfraCause.DEADLINE, "anything", False),
    (InfraCause.DRAINING, "anything", False),
    (InfraCause.TASK_TOO_LARGE, "anything", True),
])
def test_slot_blame_reads_the_cause_not_the_words(cause: InfraCause, detail: str, slots_fault: bool) -> None:
    assert is_slot_fault(ScoreResult.failure(Verdict.INFRA_ERROR, detail, infra_cause=cause)) is slots_fault
    assert is_slot_fault(ScoreResult.failure(Verdict.TIMEOUT, detail)) is True
    assert is_slot_fault(ScoreResult.failure(Verdict.INCORRECT, detail)) is False


@pytest.mark.parametrize(("cause", "detail", "attempts"), [
    ("other", "deadline exceeded: only the words say so", 3),
    ("draining", "anything", 3),
    ("task_too_large", "the task needs more memory than the device has", 1),
    ("deadline", "stuck", 1),
])
def test_the_client_retries_by_the_cause(daemon_factory, cause: str, detail: str, attempts: int) -> None:
    bad = daemon_factory(backend=FakeBackend(force_verdict="INFRA_ERROR", force_cause=cause, force_detail=detail),
                         fault_threshold=0)
    with FarmClient([bad.target], poll_interval_s=0.2, max_attempts=3) as farm:
        res = farm.score("L1/1", fake_source(sleep=0.05, salt=cause), deadline_s=20)
    assert res.verdict is Verdict.INFRA_ERROR
    assert bad.backend.started == attempts, (cause, bad.backend.started)
    if attempts == 1:  # final: the daemon's answer itself, its cause kept
        assert res.result.cause is InfraCause(cause) and res.result.detail == detail
