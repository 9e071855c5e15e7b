"""`learner bench --tiny` runs end to end on CPU and writes a sane JSON report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from learner.bench.throughput import qwen2_1b_config, train_flops_per_token
from learner.cli import main


def test_bench_tiny_via_cli(tmp_path: Path, capsys) -> None:
    out = tmp_path / "bench.json"
    rc = main(["bench", "--tiny", "--out", str(out), "--decode-batches", "2", "--decode-steps", "4"])
    assert rc == 0
    res = json.loads(out.read_text())
    assert res["errors"] == []
    (train,) = res["train"]
    assert train["tokens_per_s"] > 0 and train["mfu"] > 0 and train["loss"] > 0
    (dec,) = res["decode"]
    assert dec["batch"] == 2 and dec["tokens_per_s"] > 0 and dec["bytes_per_step"] > dec["weight_bytes"]
    assert "decode" in capsys.readouterr().out


def test_flop_and_param_accounting() -> None:
    cfg = qwen2_1b_config()
    assert 1.0e9 < cfg.num_params() < 1.1e9
    n = cfg.num_matmul_params()
    assert train_flops_per_token(cfg, 4096) == 6 * n + 6 * 16 * 4096 * 2048


@pytest.mark.slow
@pytest.mark.long  # the benchmark suite's smoke run, every part
def test_suite_tiny_runs_every_part_and_writes_the_table(tmp_path: Path) -> None:
    from learner.bench.throughput import run_suite, suite_table

    res = run_suite("tiny", tmp_path)
    assert res["errors"] == [] and res["copy_bandwidth_bytes_per_s"] > 0
    rl = res["rl"]
    assert rl["new_tokens"] == rl["prompts"] * rl["group"] * rl["max_new"]  # no EOS at random init
    assert rl["micro_batches"] > 1 and rl["rollout_tokens_per_s"] > 0
    assert rl["step_s"] < rl["first_step_s"]  # the timed step reuses the first step's compilations
    assert 0 < res["decode"]["frac_of_bound"] and res["train"]["micro_batches"] > 1
    table = (tmp_path / "suite.md").read_text()
    assert table.strip() == suite_table(json.loads((tmp_path / "suite.json").read_text())).strip()
    assert "RL step, G=4" in table and "of the HBM bound" in table and "MFU" in table


@pytest.mark.long  # a benchmark's smoke run: one process per variant
def test_mfu_sweep_runs_each_variant_in_its_own_process(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    out = tmp_path / "sweep.jsonl"
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, str(root / "benchmarks" / "mfu_sweep.py"), "--suite", "tiny",
                           "--variants", "base,mb2x,remat_none", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["variant"] for r in rows] == ["base", "mb2x", "remat_none"]
    assert rows[0]["micro_batches"] == 2 and rows[1]["micro_batches"] == 1  # twice the tokens per micro-batch
    assert rows[2]["remat"] is False and all(r["mfu"] > 0 for r in rows)
    assert "| remat_none | none | 2 (64) |" in proc.stdout
