"""--save-failing-input and --profile on CPU: the real judge, workers and CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from evalfarm import ScoreConfig, Verdict
from evalfarm.judge.diagnose import Diagnostics
from evalfarm.scoring import as_candidate, as_task, score

REPO = Path(__file__).resolve().parent.parent
QUICK = ScoreConfig(num_correctness_inputs=10, timing_budget_s=0.3, min_timed_rounds=7, warmup_rounds=1)


def test_failing_input_is_written_by_the_judge_and_loads(data_dir, build_pool, tmp_path):
    out = tmp_path / "failing"
    r = score(as_task(str(data_dir / "task_scale.py")), as_candidate(str(data_dir / "cand_wrong.py")), QUICK,
              build_pool=build_pool, diagnostics=Diagnostics(failing_input_dir=str(out)))
    assert r.verdict is Verdict.INCORRECT
    meta = json.loads((out / "failing_input.json").read_text())
    assert meta["correctness_round"] == 1 and meta["reason"] in r.detail
    assert r.evidence.diagnostics["failing_input"]["dir"] == str(out)
    (x,) = torch.load(out / "inputs.pt")
    (ref,) = torch.load(out / "reference_output.pt")
    (cand,) = torch.load(out / "candidate_output.pt")
    assert x.shape == ref.shape == cand.shape == (8192,)
    assert meta["inputs"][0]["shape"] == [8192] and meta["candidate_output"][0]["dtype"] == "float32"
    # The candidate is off by 0.5 on its last element only: the files show exactly that.
    assert torch.equal(ref[:-1], cand[:-1])
    assert torch.allclose(cand[-1], ref[-1] + 0.5)


def test_correct_candidate_no_failing_input_and_profile_kept_through_reverification(data_dir, build_pool, tmp_path):
    out, prof = tmp_path / "failing", tmp_path / "prof"
    r = score(as_task(str(data_dir / "task_scale.py")), as_candidate(str(data_dir / "cand_same.py")),
              QUICK.replace(reverify_above=0.01), build_pool=build_pool,
              diagnostics=Diagnostics(profile_dir=str(prof), failing_input_dir=str(out)))
    assert r.verdict is Verdict.OK and not out.exists() and "failing_input" not in r.evidence.diagnostics
    assert r.evidence.reverified  # a second judge measured it; the first one's profile is still reported
    assert r.evidence.diagnostics["profile"]["files"] == [str(prof / "candidate_trace.json"),
                                                          str(prof / "candidate_key_averages.txt")]


def test_cli_profile_writes_a_trace_on_cpu(data_dir, tmp_path):
    prof = tmp_path / "prof"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "evalfarm", "score", "--task", str(data_dir / "task_scale.py"),
         "--candidate", str(data_dir / "cand_same.py"), "--inputs", "10", "--budget", "0.3", "--json",
         "--profile", str(prof), "--cache-dir", str(tmp_path / "cache")],
        env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["verdict"] == "OK", result["detail"]
    trace = json.loads((prof / "candidate_trace.json").read_text())
    names = {e.get("name") for e in trace["traceEvents"]}
    assert "evalfarm_profiled_call" in names
    assert "aten::relu" in (prof / "candidate_key_averages.txt").read_text()
    summary = json.loads((prof / "profile.json").read_text())
    assert summary["ncu"] is None and "not a CUDA GPU" in summary["ncu_note"]
    assert str(prof / "candidate_trace.json") in result["evidence"]["diagnostics"]["profile"]["files"]


def test_cli_diagnostics_are_local_only(data_dir, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "evalfarm", "score", "--task", "L1/1", "--candidate", str(data_dir / "cand_same.py"),
         "--server", "127.0.0.1:1", "--save-failing-input", str(tmp_path / "f")],
        env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "local scoring only" in done.stderr and "Traceback" not in done.stderr


def test_ncu_target_runs_the_candidate_once_profiled(data_dir, tmp_path):
    """The process ncu profiles on a GPU host, run here without ncu on the CPU."""
    spec = {"task_name": "scale", "task_source": (data_dir / "task_scale.py").read_text(), "size_profiles": {},
            "profile": "default", "candidate_source": (data_dir / "cand_same.py").read_text(),
            "cache_dir": str(tmp_path / "cache"), "arch": "cpu", "device": "cpu"}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    done = subprocess.run([sys.executable, "-m", "evalfarm.judge.ncu_target", str(tmp_path / "spec.json")],
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "profiled one call of ModelNew" in done.stdout


def test_cli_diagnostics_paths_single_and_batch(tmp_path):
    from evalfarm.cli import _batch_diagnostics, _diagnostics_root, build_parser
    from evalfarm.engineer.batch import BatchItem

    parse = build_parser().parse_args
    single = parse(["score", "--task", "L1/1", "--candidate", "c.py", "--profile"])
    assert _diagnostics_root(single) == (Path("evalfarm-profile"), None)
    out = tmp_path / "runs" / "results.jsonl"
    args = parse(["score", "--candidates", "c.jsonl", "--out", str(out), "--profile", "--save-failing-input",
                  str(tmp_path / "f")])
    profile, failing = _diagnostics_root(args)
    assert profile == tmp_path / "runs" / "results_profile" and failing == tmp_path / "f"
    d = _batch_diagnostics(profile, failing)(BatchItem("L1/3/sample_0", "L1/3", "src"))
    assert d.profile_dir == str(profile / "L1_3_sample_0") and d.failing_input_dir == str(failing / "L1_3_sample_0")
    assert _batch_diagnostics(None, None) is None
    assert _diagnostics_root(parse(["score", "--task", "L1/1", "--candidate", "c.py"])) == (None, None)


@pytest.mark.gpu
def test_profile_on_a_gpu_has_kernels_and_an_ncu_report_or_a_note(tmp_path):
    import shutil

    variant = REPO / "evalfarm/tasks/builtin/variants/level1/3_RMSNorm/fast_cuda_channel_loop.py"
    prof = tmp_path / "prof"
    r = score(as_task("L1/3"), as_candidate(str(variant)), QUICK.replace(device="cuda"),
              diagnostics=Diagnostics(profile_dir=str(prof)))
    assert r.verdict is Verdict.OK, r.detail
    trace = json.loads((prof / "candidate_trace.json").read_text())
    assert any(e.get("cat") == "kernel" for e in trace["traceEvents"])
    summary = r.evidence.diagnostics["profile"]
    if shutil.which("ncu"):
        assert summary["ncu"] and Path(summary["ncu"]).exists() or summary["ncu_note"], summary
    else:
        assert summary["ncu"] is None and "ncu is not on PATH" in summary["ncu_note"]


def test_failing_input_for_an_output_of_the_wrong_shape(data_dir, build_pool, tmp_path):
    out = tmp_path / "failing"
    short = (data_dir / "cand_same.py").read_text().replace(
        "return y + 0.0", "return (y + 0.0)[:-1]")
    assert short != (data_dir / "cand_same.py").read_text()
    r = score(as_task(str(data_dir / "task_scale.py")), as_candidate(short), QUICK,
              build_pool=build_pool, diagnostics=Diagnostics(failing_input_dir=str(out)))
    assert r.verdict is Verdict.INCORRECT and "shape" in r.detail, (r.verdict, r.detail)
    meta = json.loads((out / "failing_input.json").read_text())
    assert meta["reason"].startswith("structure: ") and "shape" in meta["reason"]
    assert meta["correctness_round"] == 1
    (x,) = torch.load(out / "inputs.pt")
    assert x.shape == (8192,)
    assert torch.load(out / "candidate_output.pt") == []  # the worker refused it: never sent to the judge
    ref = torch.load(out / "reference_output.pt")  # saved when the reference ran first in that round
    assert (ref == [] and "had not run yet" in meta["reason"]) or [t.shape for t in ref] == [(8192,)], ref
