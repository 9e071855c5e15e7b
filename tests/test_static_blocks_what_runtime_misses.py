"""Every static rule that still decides a verdict alone, shown missed by the runtime alone.

The runtime decides verdicts; a static finding blocks by itself only for what is invisible at run
time or unsafe to run (docs/security.md, "Static analysis testifies"). Each test here scores an
attack twice: with static analysis off (the runtime alone: it pays the attack, or the damage is
done before any verdict) and with it on (the blocking rule refuses it before anything runs).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from evalfarm import ScoreConfig, Verdict
from evalfarm.result import ScoreResult
from evalfarm.sandbox import bubblewrap, cgroup
from evalfarm.scoring import as_candidate, as_task, score

RUNTIME = Path(__file__).parent / "adversarial" / "runtime"

QUICK = ScoreConfig(num_correctness_inputs=30, timing_budget_s=1.0, min_timed_rounds=35, reverify_above=0)


@pytest.fixture(scope="module")
def task(data_dir):
    return as_task(str(data_dir / "task_scale.py"))


def score_attack(task, source: str | Path, build_pool, cfg: ScoreConfig) -> ScoreResult:
    candidate = as_candidate(str(source)) if isinstance(source, Path) else as_candidate(source)
    return score(task, candidate, cfg, build_pool=build_pool)


def _both(task, source, build_pool, monkeypatch):
    on = score_attack(task, source, build_pool, QUICK)
    with monkeypatch.context() as m:
        m.setattr("evalfarm.scoring.check_candidate_source", lambda *a, **k: [])
        off = score_attack(task, source, build_pool, QUICK)
    return on, off


def test_filesystem_removing_a_file_outside_its_directory(task, build_pool, monkeypatch, tmp_path):
    # Unsafe to run: the file is gone whatever the verdict says afterwards.
    def source(victim: Path) -> str:
        victim.write_text("keep me")
        return (RUNTIME / "filesystem_remove.py").read_text().replace('VICTIM = ""', f"VICTIM = {str(victim)!r}")

    kept, lost = tmp_path / "kept.txt", tmp_path / "lost.txt"
    on = score_attack(task, source(kept), build_pool, QUICK)
    assert on.verdict is Verdict.HACK_DETECTED and "filesystem" in on.detail, (on.verdict, on.detail)
    assert kept.exists()
    with monkeypatch.context() as m:
        m.setattr("evalfarm.scoring.check_candidate_source", lambda *a, **k: [])
        off = score_attack(task, source(lost), build_pool, QUICK)
    if bubblewrap.selected()[0] is not None:
        # Inside bubblewrap the host's files outside the sandbox's view are not there to remove:
        # the runtime alone protects them; the rule still refuses before anything runs.
        assert lost.exists(), "a file outside the bubblewrap view was removed"
    else:
        assert not lost.exists(), "the runtime alone let the candidate remove a file outside its directory"
    assert off.verdict is Verdict.OK, (off.verdict, off.detail)


def test_process_abuse_a_child_that_outlives_the_verdict(task, build_pool, monkeypatch, tmp_path):
    # Unsafe to run: a detached child (its own session) escapes the stop of the candidate's
    # process group, so it runs while the reference is timed. The runtime now ends it with the
    # evaluation (the judge is a child subreaper and kills every descendant; as root the worker's
    # PID namespace goes too), so it no longer outlives the verdict, and where the worker has a
    # cgroup the judge finds it outside the group after the first call (escaped_process). Without
    # a cgroup it runs unseen while the evaluation runs, and without a PID namespace it can still
    # reach the reference worker's process: the static rule keeps blocking (docs/security.md).
    marker = tmp_path / "child-was-here"
    child = f"import time, pathlib; time.sleep(3); pathlib.Path({str(marker)!r}).write_text('x')"
    extra = f"\nimport subprocess, sys\nsubprocess.Popen([sys.executable, '-c', {child!r}], start_new_session=True)\n"
    src = (Path(__file__).parent / "data" / "cand_same.py").read_text() + extra
    on = score_attack(task, src, build_pool, QUICK)
    assert on.verdict is Verdict.HACK_DETECTED and "process_abuse" in on.detail, (on.verdict, on.detail)
    with monkeypatch.context() as m:
        m.setattr("evalfarm.scoring.check_candidate_source", lambda *a, **k: [])
        off = score_attack(task, src, build_pool, QUICK)
    probe = cgroup.create("probe")[0]
    if probe is not None:
        probe.remove()
        assert off.verdict is Verdict.HACK_DETECTED and "escaped_process" in off.detail, (off.verdict, off.detail)
    else:
        assert off.verdict is Verdict.OK, (off.verdict, off.detail)
    subprocess.run([sys.executable, "-c", "import time; time.sleep(5)"], check=True)
    assert not marker.exists(), "a child of the candidate outlived its evaluation"
