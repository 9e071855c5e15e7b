"""ScoreResult JSON round trips, also across daemon and client versions."""

from __future__ import annotations

from evalfarm.result import Evidence, ScoreResult, TimingEvidence
from evalfarm.verdict import Verdict


def test_round_trip_ignores_fields_from_a_newer_daemon():
    r = ScoreResult(verdict=Verdict.OK, speedup=1.5, detail="",
                    evidence=Evidence(device="cpu", guards=["x: y"], timing=TimingEvidence(rounds=7)))
    d = r.to_dict()
    assert ScoreResult.from_dict(d) == r
    d["evidence"]["from_a_newer_daemon"] = {"x": 1}
    d["evidence"]["timing"]["also_new"] = 3
    back = ScoreResult.from_dict(d)
    assert back == r and back.evidence.timing.rounds == 7 and back.evidence.guards == ["x: y"]
