"""benchmarks/probes/drift_probe.py: the drift statistic on synthetic rounds, and the probe end to end on CPU."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "probes" / "drift_probe.py"


def _module():
    spec = importlib.util.spec_from_file_location("drift_probe", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_exchangeable_rounds_have_a_drift_ratio_near_one():
    rng = np.random.default_rng(1)
    ref = 450 * (1 + 0.03 * rng.standard_normal(2100))
    cand = 280 * (1 + 0.03 * rng.standard_normal(2100))
    row = _module().drift_summary(ref.tolist(), cand.tolist(), seed=3)
    assert 0.4 < row["drift_ratio"] < 2.5, row
    assert row["score"] == pytest.approx(450 / 280, rel=0.01)
    assert max(row["cand_buckets_us"]) - min(row["cand_buckets_us"]) < 5


def test_a_candidate_that_slows_over_the_run_shows_drift_on_its_side_only():
    rng = np.random.default_rng(2)
    n = 2100
    ref = 450 * (1 + 0.03 * rng.standard_normal(n))
    # 267 us for the first half of the run, 305 us for the second, as seen on an H200.
    cand = np.where(np.arange(n) < n // 2, 267.0, 305.0) * (1 + 0.03 * rng.standard_normal(n))
    row = _module().drift_summary(ref.tolist(), cand.tolist(), seed=3)
    assert row["drift_ratio"] > 4, row
    assert row["cand_buckets_us"][0] == pytest.approx(267, rel=0.02)
    assert row["cand_buckets_us"][-1] == pytest.approx(305, rel=0.02)
    assert max(row["ref_buckets_us"]) - min(row["ref_buckets_us"]) < 5
    # The interval the judge would report is far wider than the shuffled rounds' spread suggests.
    assert row["ci_pct"] > 2 * row["shuffled_sd_pct"]


def test_probe_runs_on_cpu_and_writes_a_row_per_mode(tmp_path):
    out = tmp_path / "rows.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--task", "L1/8", "--variant", "identical",
         "--rounds", "14", "--modes", "fixed,poison", "--json", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert [r["mode"] for r in rows] == ["fixed", "poison"]
    for r in rows:
        assert r["rounds"] == 14 and len(r["cand_buckets_us"]) == 7 and r["ref_us"] > 0 and r["cand_us"] > 0
    assert "| poison |" in proc.stdout


def test_probe_refuses_cuda_only_modes_on_cpu():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--modes", "graph"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2 and "need a CUDA device" in proc.stderr
