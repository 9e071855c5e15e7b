"""Batch scoring: inputs (JSONL, run directories), resume after a killed run, the summary table."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evalfarm.engineer import batch

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parents[1]


def test_jsonl_with_sources_paths_and_default_ids(tmp_path):
    (tmp_path / "k").mkdir()
    (tmp_path / "k" / "a.py").write_text("class ModelNew: pass\n")
    lines = [
        json.dumps({"task": "L1/1", "candidate": "k/a.py", "sample_id": "first"}),
        "",
        "// a comment",
        json.dumps({"task": "L1/2", "candidate": "import torch\nclass ModelNew: pass\n"}),
    ]
    (tmp_path / "c.jsonl").write_text("\n".join(lines) + "\n")
    items = batch.read_candidates(tmp_path / "c.jsonl")
    assert [(i.sample_id, i.task) for i in items] == [("first", "L1/1"), ("L1/2#4", "L1/2")]
    assert items[0].source == "class ModelNew: pass\n" and items[0].path == str(tmp_path / "k" / "a.py")
    (tmp_path / "bad.jsonl").write_text('{"task": "L1/1"}\n')
    with pytest.raises(batch.BatchInputError, match="line 1: expected an object"):
        batch.read_candidates(tmp_path / "bad.jsonl")
    (tmp_path / "dup.jsonl").write_text("\n".join([lines[0], lines[0]]) + "\n")
    with pytest.raises(batch.BatchInputError, match=r"'first' appears 2 times \(line 1, line 2\)"):
        batch.read_candidates(tmp_path / "dup.jsonl")


def test_kernelbench_style_run_directory(tmp_path):
    for level, problem, sample in ((1, 10, 0), (1, 2, 1), (1, 2, 0), (3, 1, 0)):
        d = tmp_path / "run" / f"level{level}" / f"problem_{problem}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"sample_{sample}.py").write_text(f"# {level} {problem} {sample}\nclass ModelNew: pass\n")
    (tmp_path / "run" / "notes.py").write_text("x = 1\n")
    items = batch.read_candidates(tmp_path / "run")
    assert [i.sample_id for i in items] == ["L1/2/sample_0", "L1/2/sample_1", "L1/10/sample_0", "L3/1/sample_0"]
    assert [i.task for i in items] == ["L1/2", "L1/2", "L1/10", "L3/1"]


def _row(task: str, verdict: str, speedup: float | None = None, detail: str = "") -> dict:
    return {"sample_id": f"{task}-{verdict}-{speedup}-{detail}", "task": task, "verdict": verdict,
            "speedup": speedup, "detail": detail}


def test_summary_success_fast_p_geomean_and_guards():
    rows = [_row("A", "OK", 1.0), _row("A", "OK", 1.6), _row("A", "OK", 4.0), _row("A", "INCORRECT"),
            _row("B", "HACK_DETECTED", detail="guard timer_patch: x"), _row("B", "HACK_DETECTED", detail="guard timer_patch: y"),
            _row("B", "OK", 0.5, "z")]
    summary = {s.task: s for s in batch.summarise(rows)}
    a, b, both = summary["A"], summary["B"], summary["ALL"]
    assert a.samples == 4 and a.success_rate == 0.75
    assert a.fast_p == {1.0: 0.5, 1.5: 0.5, 2.0: 0.25}  # speedup > p among all samples
    assert a.geomean_speedup == pytest.approx((1.0 * 1.6 * 4.0) ** (1 / 3))
    assert b.top_guards == [("timer_patch", 2)] and b.verdicts == {"HACK_DETECTED": 2, "OK": 1}
    assert both.samples == 7 and both.fast_p[1.0] == pytest.approx(2 / 7)
    md, csv_text, text = (f([*summary.values()]) for f in (batch.format_markdown, batch.format_csv, batch.format_table))
    assert md.startswith("| task | samples |") and "| ALL | 7 |" in md
    assert csv_text.splitlines()[0].startswith("task,samples,success_rate,fast_1,fast_1.5,fast_2,geomean_speedup")
    assert "timer_patch:2" in text


def test_a_torn_last_line_is_dropped_on_resume(tmp_path):
    out = tmp_path / "r.jsonl"
    out.write_text(json.dumps({"sample_id": "a", "task": "t", "verdict": "OK", "speedup": 1.0}) + "\n" + '{"sample_id": "b", "ta')
    assert [r["sample_id"] for r in batch.read_results(out)] == ["a"]
    assert out.read_text().endswith("}\n")


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "evalfarm", "score", *args]


@pytest.mark.slow
def test_batch_cli_resumes_after_being_killed(tmp_path):
    """A real batch on CPU: killed after its first result, run again, every sample scored exactly once."""
    task = str(DATA / "task_scale.py")
    cands = [("same", "cand_same.py"), ("wrong", "cand_wrong.py"), ("same2", "cand_same.py")]
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text("".join(json.dumps({"task": task, "candidate": str(DATA / f), "sample_id": sid}) + "\n"
                             for sid, f in cands))
    out = tmp_path / "results.jsonl"
    quick = ["--inputs", "10", "--budget", "0.3", "--cache-dir", str(tmp_path / "cache")]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(_cli("--candidates", str(jsonl), "--out", str(out), *quick), env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not (out.exists() and out.read_text().count("\n") >= 1):
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    first = batch.read_results(out)
    assert 1 <= len(first) < 3, "the run was to be killed part-way"
    done = subprocess.run(_cli("--candidates", str(jsonl), "--out", str(out), *quick, "--fail-on", "INCORRECT",
                               "--table-md", str(tmp_path / "t.md"), "--table-csv", str(tmp_path / "t.csv")),
                          env=env, capture_output=True, text=True, timeout=600)
    rows = batch.read_results(out)
    assert sorted(r["sample_id"] for r in rows) == ["same", "same2", "wrong"], done.stderr
    assert rows[: len(first)] == first  # earlier results kept, not scored again
    verdicts = {r["sample_id"]: r["verdict"] for r in rows}
    assert verdicts == {"same": "OK", "same2": "OK", "wrong": "INCORRECT"}
    assert done.returncode == 1  # --fail-on INCORRECT
    assert "ALL" in done.stdout and "| ALL | 3 | 67% |" in (tmp_path / "t.md").read_text()
    assert (tmp_path / "t.csv").read_text().count("\n") == 3  # header, the task, ALL


def test_cli_conventions(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}  # no nvidia-smi on PATH
    run = lambda *a: subprocess.run([sys.executable, "-m", "evalfarm", *a], env=env, capture_output=True,  # noqa: E731
                                    text=True, timeout=120)
    v = run("--version")
    assert v.returncode == 0 and v.stdout.startswith("evalfarm ")
    h = run("score", "--help")
    assert "(default: cpu)" in h.stdout and "--fail-on" in h.stdout
    no_gpu = run("score", "--task", "L1/1", "--candidate", str(DATA / "cand_same.py"), "--device", "cuda")
    assert no_gpu.returncode == 2 and "no NVIDIA GPU" in no_gpu.stderr and "Traceback" not in no_gpu.stderr
    bad = run("score", "--task", "L1/1", "--candidate", str(DATA / "cand_same.py"), "--fail-on", "NOPE")
    assert bad.returncode == 2 and "unknown verdict" in bad.stderr
    missing = run("score", "--candidates", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "o.jsonl"))
    assert missing.returncode == 2 and "candidates not found" in missing.stderr
    piped = subprocess.run(f"{sys.executable} -m evalfarm tasks --json | true", shell=True, env=env,
                           capture_output=True, text=True, timeout=120)
    assert "Traceback" not in piped.stderr and "BrokenPipe" not in piped.stderr


@pytest.mark.slow  # a judged sample and a (failing, quick) C++ build
def test_local_batch_builds_every_extension_ahead(tmp_path):
    """The first sample (no extension) is scored while the second sample's build already runs in the
    pool: builds do not wait for their turn at the judge."""
    from evalfarm.build import BuildPool
    from evalfarm.config import ScoreConfig
    from evalfarm.engineer.batch_score import local_scorer
    from evalfarm.tasks.suite import resolve_task

    items = [batch.BatchItem(task=str(DATA / "task_scale.py"), source=(DATA / f).read_text(), sample_id=sid)
             for sid, f in (("plain", "cand_same.py"), ("built", "cand_compile_error.py"))]
    pool = BuildPool(max_workers=2, cache_dir=tmp_path / "build")
    try:
        config = ScoreConfig(num_correctness_inputs=5, timing_budget_s=0.2, min_timed_rounds=7)
        rows = local_scorer(config, resolve_task, None, pool)(items)
        first = next(rows)
        assert first["sample_id"] == "plain" and first["verdict"] == "OK", first
        stats = pool.stats()
        assert stats["builds"] + stats["in_flight"] == 1, stats  # the second sample's build, started ahead
        second = next(rows)
        assert second["verdict"] == "COMPILE_ERROR", second
    finally:
        pool.close()
