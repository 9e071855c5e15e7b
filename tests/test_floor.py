"""The physical-floor gate: the least time a correct call can take is writing its outputs."""

from __future__ import annotations

import pytest
import torch

from evalfarm.judge.floor import SAFETY, WRITE_RATE_FACTOR, Floor, measure_copy_rate, physical_floor
from evalfarm.result import Evidence, ScoreResult, TimingEvidence
from evalfarm.verdict import Verdict


def test_copy_rate_on_this_cpu_is_plausible():
    rate, probe = measure_copy_rate(torch.device("cpu"), 8 << 20)
    assert probe == 8 << 20
    assert 1e8 < rate < 2e12, rate  # between 0.1 GB/s and 2 TB/s for a host memcpy
    _, small = measure_copy_rate(torch.device("cpu"), 10)
    assert small == 1 << 20  # tiny outputs are probed with at least 1 MiB


def test_floor_arithmetic_and_verdict_text():
    f = Floor(output_bytes=400_000_000, copy_rate_bytes_s=100e9, probe_bytes=256 << 20)
    # 400 MB at 4x 100 GB/s = 1 ms
    assert WRITE_RATE_FACTOR * SAFETY == 4.0
    assert f.seconds == pytest.approx(1e-3)
    assert f.violated_by(0.5e-3) and not f.violated_by(1.5e-3)
    text = f.explain(0.5e-3)
    assert text.startswith("guard physical_floor:") and "500.00 us" in text and "400.000 MB" in text
    assert f.to_dict()["floor_us"] == pytest.approx(1000.0)
    assert not Floor(0, 1e9, 1 << 20).violated_by(0.0)  # no outputs, no floor


def test_honest_cpu_call_is_far_above_the_floor():
    x = torch.randn(2048, 2048)
    f = physical_floor(torch.device("cpu"), x.numel() * x.element_size())
    import time

    t0 = time.perf_counter()
    torch.nn.functional.gelu(x)
    elapsed = time.perf_counter() - t0
    assert not f.violated_by(elapsed), (elapsed, f.to_dict())


def test_evidence_round_trip_keeps_the_floor_and_ignores_unknown_fields():
    r = ScoreResult(verdict=Verdict.OK, speedup=1.5, evidence=Evidence(
        physical_floor={"output_bytes": 10, "floor_us": 0.1}, timing=TimingEvidence(rounds=7)))
    d = r.to_dict()
    d["evidence"]["from_a_newer_daemon"] = {"x": 1}
    d["evidence"]["timing"]["also_new"] = 3
    back = ScoreResult.from_dict(d)
    assert back.evidence.physical_floor == {"output_bytes": 10, "floor_us": 0.1}
    assert back.evidence.timing.rounds == 7
