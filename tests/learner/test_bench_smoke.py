"""`learner bench --tiny` runs end to end on CPU and writes a sane JSON report."""

from __future__ import annotations

import json
from pathlib import Path

from learner.bench import qwen2_1b_config, train_flops_per_token
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
