"""scripts/kernelbench_scan.py: one long-lived child for many tasks, a fresh one after a timeout,
resume from an existing output, and a summary that tells failures from tasks not scanned."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "kernelbench_scan.py"
KB = Path(__file__).parent / "data" / "kernelbench_mini"
ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("kernelbench_scan", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _scan(root: Path, out: Path, *extra: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(root), "--device", "cpu", "--free-gb", "40",
         "--out", str(out), "--summary", str(out.with_suffix(".md")), *extra],
        capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_one_child_lints_every_task_and_resume_adds_only_the_missing(tmp_path):
    out = tmp_path / "scan.jsonl"
    _scan(KB, out, "--levels", "1")
    first = _rows(out)
    assert [r["id"] for r in first] == ["L1/1", "L1/2"]
    # The full-size softmax (6.4 GB in and out) does not fit 40 GB: planned from shapes, not run.
    big = first[1]
    assert big["loaded"] and big["fits"] is False and big["error"].startswith("task_too_large")
    assert first[0]["ok"] and first[0]["ref_ms"] is not None
    assert len({r["worker"] for r in first}) == 1  # the same child process for both tasks

    summary = _scan(KB, out, "--levels", "1,2", "--resume")
    rows = _rows(out)
    assert [r["id"] for r in rows] == ["L1/1", "L1/2", "L2/1"]  # level 1 kept, level 2 appended
    assert rows[:2] == first
    assert rows[2]["ok"] and rows[2]["scanned"]
    assert "| 2 | 1 | 1 | 1 | 0 | 0 | 0 | 0 |" in summary
    assert "L1/2 BigSoftmax: task_too_large" in summary


def test_a_hanging_task_is_killed_and_the_next_runs_in_a_fresh_child(tmp_path):
    level1 = tmp_path / "KernelBench" / "level1"
    level1.mkdir(parents=True)
    ok = (KB / "KernelBench" / "level1" / "1_ScaledTanh.py").read_text()
    (level1 / "1_Hangs.py").write_text(ok.replace("def get_inputs():\n", "def get_inputs():\n    import time\n"
                                                   "    time.sleep(600)\n"))
    (level1 / "2_Fine.py").write_text(ok)
    (level1 / "3_AlsoFine.py").write_text(ok)
    out = tmp_path / "scan.jsonl"
    summary = _scan(tmp_path, out, "--task-timeout", "10")  # room for a loaded machine
    hang, fine, also = _rows(out)
    assert not hang["loaded"] and hang["error"] == "timed out after 10 s" and hang["scanned"]
    assert fine["ok"] and also["ok"]
    assert fine["worker"] != hang["worker"] and also["worker"] == fine["worker"]
    assert "| 1 | 3 | 2 | 2 | 0 | 0 | 1 | 0 |" in summary
    assert "L1/1 Hangs: timed out after 10 s" in summary


def test_summary_counts_not_scanned_apart_and_survives_empty_errors():
    mod = _module()
    rows = [
        {"id": "L1/19", "name": "ReLU", "level": 1, "scanned": True, "loaded": True, "ok": False, "fits": False,
         "error": "", "degenerate": "", "need_bytes": 90e9, "free_bytes": 84.5e9, "ref_ms": 9.0},
        {"id": "L1/20", "name": "LeakyReLU", "level": 1, "scanned": True, "loaded": False, "ok": False, "error": ""},
        {"id": "L1/21", "name": "Sigmoid", "level": 1, "scanned": False, "loaded": False, "ok": False,
         "error": "not scanned: --total-timeout reached"},
        {"id": "L1/22", "name": "Tanh", "level": 1, "loaded": True, "ok": True, "fits": True, "ref_ms": 2.0},
    ]
    text = mod.summarise(rows)
    assert "| 1 | 4 | 2 | 1 | 1 | 0 | 1 | 1 | 5.50, 9.00 |" in text
    assert "L1/19 ReLU: does not fit: needs ~90.0 GB, 84.5 GB free" in text
    assert "L1/20 LeakyReLU: not ok" in text
    assert "L1/21" not in text  # not scanned: counted, not listed as a failure
