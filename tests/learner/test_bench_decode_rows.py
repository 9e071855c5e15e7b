"""The decode-step-against-rows probe (learner.bench.decode_rows): its strong-scaling arithmetic,
its line fit, and one run of the real sampler on the tiny model through its command line."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from learner.bench.decode_rows import fit_line, strong_scaling

ROOT = Path(__file__).resolve().parents[2]


def test_strong_scaling_uses_the_measured_step_of_each_share() -> None:
    # A step that costs the same at any row count cannot scale: N GPUs each take as long as one.
    flat = strong_scaling({32: 2.0, 64: 2.0, 128: 2.0}, 128)
    assert flat == pytest.approx({2: 0.5, 4: 0.25})
    # A step proportional to the rows scales perfectly.
    linear = strong_scaling({32: 1.0, 64: 2.0, 128: 4.0}, 128)
    assert linear == pytest.approx({2: 1.0, 4: 1.0})
    # The H100 figures of docs/benchmarks.md: 6.33 ms at 128 rows, 4.13 at 64, 2.92 at 32.
    measured = strong_scaling({32: 2.921, 64: 4.131, 128: 6.332}, 128)
    assert measured[2] == pytest.approx(6.332 / (2 * 4.131))
    assert measured[4] == pytest.approx(6.332 / (4 * 2.921))
    # Shares that were not measured, or do not divide the batch, are left out.
    assert strong_scaling({48: 1.0, 128: 3.0}, 128) == {}
    with pytest.raises(ValueError, match="global batch"):
        strong_scaling({32: 1.0, 64: 2.0}, 128)


def test_fit_line_recovers_fixed_and_per_row_costs() -> None:
    fixed, per_row = fit_line([32, 64, 128], [0.0018 + 35e-6 * r for r in (32, 64, 128)])
    assert fixed == pytest.approx(0.0018)
    assert per_row == pytest.approx(35e-6)
    with pytest.raises(ValueError, match="two distinct"):
        fit_line([64, 64], [1.0, 1.0])


def test_command_line_measures_every_row_count_on_the_real_sampler(tmp_path: Path) -> None:
    out = tmp_path / "rows.jsonl"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "learner.bench.decode_rows", "--suite", "tiny",
                           "--steps-per-check", "2", "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    r = json.loads(out.read_text().splitlines()[-1])
    assert [p["rows"] for p in r["points"]] == [2, 4, 8]
    # Timings on a loaded CPU are noise; that each was measured and is a number is what holds.
    assert all(math.isfinite(p["step_ms"]) and p["short_s"] > 0 and p["long_s"] > 0 for p in r["points"])
    assert set(r["predicted_efficiency"]) == {"2", "4"}
    assert r["steps_per_check"] == 2 and r["copy_bandwidth"] > 0
    assert "| rows | ms per step |" in proc.stdout
