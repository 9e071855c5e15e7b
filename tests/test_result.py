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


def test_precision_and_roofline_evidence_round_trip_as_json():
    import json

    precision = {"applied": True, "rounds": 8, "widened_rounds": 4, "ref_error": 2.2e-7, "cand_error": 2.2e-7,
                 "ratio": 1.0, "k": 2.0, "floor": 1.9e-6, "group": "task", "outputs": [{"output": 0, "ok": True}],
                 "notes": []}
    roofline = {"flops": 33554432, "bytes": 786432, "ref": {"tflops": 0.1, "flop_fraction": None},
                "cand": {"tflops": 0.1, "flop_fraction": None}, "peaks": {"flops_per_s": None, "note": "CPU"}}
    r = ScoreResult(verdict=Verdict.OK, speedup=1.0, evidence=Evidence(precision=precision, roofline=roofline))
    back = ScoreResult.from_dict(json.loads(r.to_json()))
    assert back == r and back.evidence.precision["ratio"] == 1.0 and back.evidence.roofline["flops"] == 33554432
    assert ScoreResult(verdict=Verdict.INCORRECT).evidence.precision == {}  # set by a judge only
