"""End to end on CPU: the real learner CLI, real local farm daemons, all three stages, and a
SIGKILL in the middle of contrastive RL followed by a resume with the same command."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# A small version of configs/demo.py: two tasks, short completions, a handful of steps.
OVERRIDES = [
    "--config.tasks.ids=L1/1,L2/6",
    "--config.tasks.heldout=",
    "--config.tasks.programs=fast",
    "--config.sft.steps=80",
    "--config.sft.decay_steps=20",
    "--config.sft.batch_size=4",
    "--config.selfsup.rounds=1",
    "--config.selfsup.samples_per_task=2",
    "--config.selfsup.passes=3",
    "--config.rl.steps=4",
    "--config.rl.tasks_per_step=2",
    "--config.rl.group_size=2",
    "--config.sampling.batch_size=4",
    "--config.sampling.max_new_tokens=192",
    "--config.eval.samples_per_task=1",
    "--config.farm.options.num_correctness_inputs=10",
    "--config.farm.options.timing_budget_s=0.5",
    "--config.checkpoint_every=1",
    "--config.rl.overlap=on",  # exercise the overlapped loop even on a local CPU farm
    "--config.progress=False",
]


def _cmd(workdir: Path) -> list[str]:
    return [sys.executable, "-m", "learner", "train", "--config", str(REPO / "configs" / "demo.py"),
            f"--config.workdir={workdir}", *OVERRIDES]


def _env() -> dict[str, str]:
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def _rl_lines(workdir: Path) -> list[dict]:
    path = workdir / "metrics.jsonl"
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if rec.get("stage") == "rl":
            out.append(rec)
    return out


def _daemon_pids(workdir: Path) -> list[int]:
    pids = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"serve" in cmd and str(workdir / "farm-cache").encode() in cmd:
            pids.append(int(p.name))
    return pids


@pytest.mark.long  # the whole learner CLI twice with a local farm: about 6-8 minutes on 2 cores
@pytest.mark.timeout(1500)  # its first run's wait, the daemon's exit and the second run's 600 s bound
def test_three_stages_then_kill_during_rl_and_resume(tmp_path):
    workdir = tmp_path / "run"
    log1 = open(tmp_path / "first.log", "w")  # noqa: SIM115
    first = subprocess.Popen(_cmd(workdir), cwd=REPO, env=_env(), stdout=log1, stderr=subprocess.STDOUT,
                             start_new_session=True)
    try:
        deadline = time.monotonic() + 480
        while time.monotonic() < deadline and first.poll() is None and len(_rl_lines(workdir)) < 2:
            time.sleep(0.5)
        assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
        assert len(_rl_lines(workdir)) >= 2, "RL did not reach step 2 in time"
        os.killpg(first.pid, signal.SIGKILL)  # the learner only; its daemon has its own session
        first.wait(30)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
        log1.close()

    # The orphaned daemon notices its learner is gone and exits by itself.
    t0 = time.monotonic()
    while _daemon_pids(workdir) and time.monotonic() - t0 < 60:
        time.sleep(0.5)
    assert not _daemon_pids(workdir), "local farm daemon outlived the killed learner"

    second = subprocess.run(_cmd(workdir), cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    out = second.stdout + second.stderr
    assert second.returncode == 0, out[-4000:]
    assert "stage sft already complete" in out and "stage selfsup already complete" in out
    resumed = re.search(r"stage rl: step (\d) of 4", out)
    assert resumed and 1 <= int(resumed.group(1)) <= 3, out[-4000:]  # from a mid-RL checkpoint

    # Every RL step has metrics; the resumed steps were written once more, never skipped.
    rl_steps = {rec["step"] for rec in _rl_lines(workdir)}
    offset = 80 + 3
    assert rl_steps == {offset + i for i in range(1, 5)}
    last = _rl_lines(workdir)[-1]
    for key in ("success_rate", "reward_mean", "kl", "clip_frac", "tokens_per_s", "farm_wait_s", "samples"):
        assert key in last, key
    # A step's wall time covers at least the part of it spent waiting on the farm and updating.
    assert last["step_s"] >= last["farm_wait_s"] + last["update_s"] > 0 and last["generate_s"] > 0
    # Overlap: every step after a (re)start used samples from the policy one update older.
    assert last["staleness"] == 1.0 and _rl_lines(workdir)[0]["staleness"] == 0.0

    # The database matches the weights: one row per sample id, RL rows for every step 1..4, each
    # step's group complete, nothing newer than the last step.
    db = sqlite3.connect(workdir / "exemplars.sqlite")
    rows = db.execute("SELECT sample_id, stage, step, verdict, reward FROM samples").fetchall()
    db.close()
    rl_rows = [r for r in rows if r[1] == "rl"]
    per_step = {}
    for _, _, step, _, _ in rl_rows:
        per_step[step] = per_step.get(step, 0) + 1
    assert per_step == {offset + i: 4 for i in range(1, 5)}, per_step
    assert len({r[0] for r in rows}) == len(rows)
    assert {r[1] for r in rows} >= {"selfsup", "rl"}
    assert all(r[4] is None for r in rows if r[3] in ("INFRA_ERROR", "LOST"))

    # SFT taught the protocol: the policy's samples after SFT parse and at least one passes.
    sft_eval = json.loads((workdir / "eval" / "sft.json").read_text())
    assert set(sft_eval["forms"]) == {"plain", "exemplars"}  # every stage under the same prompts
    assert any(s["verdict"] == "OK" for f in sft_eval["forms"].values() for s in f["samples"]), sft_eval
    assert all(s["program"] for f in sft_eval["forms"].values() for s in f["samples"])
    frozen = json.loads((workdir / "eval_exemplars.json").read_text())
    assert set(frozen) == {"L1/1", "L2/6"}
    for suffix in ("txt", "md", "json", "png"):
        assert (workdir / f"report.{suffix}").stat().st_size > 0
    report = (workdir / "report.txt").read_text()
    assert "after SFT | plain prompt" in report and "after contrastive RL | frozen exemplars" in report
    assert "Programs emitted" in report and "Did the stages move?" in report
    metrics = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    assert all("learning_rate" in m and "truncation_rate" in m for m in metrics if m["stage"] in ("rl", "selfsup"))
    assert not _daemon_pids(workdir), "the resumed run left its daemon running"

    # `learner eval` makes the same table for a checkpoint; the run's own config stays as it was.
    config_before = (workdir / "config.json").read_text()
    ev = subprocess.run([sys.executable, "-m", "learner", "eval", "--config", str(REPO / "configs" / "demo.py"),
                         f"--config.workdir={workdir}", *OVERRIDES, "--checkpoint", str(workdir / "ckpt" / "rl"),
                         "--prompts", "exemplars", "--out", str(tmp_path / "evalrep")],
                        cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)
    assert ev.returncode == 0, (ev.stdout + ev.stderr)[-3000:]
    assert "rl | frozen exemplars" in ev.stdout and "success" in ev.stdout
    summary = json.loads((tmp_path / "evalrep.json").read_text())["summaries"]["rl | frozen exemplars"]
    assert summary["total"] == 2 and 0 <= summary["success"] <= 2
    assert (workdir / "config.json").read_text() == config_before
    bad = subprocess.run([sys.executable, "-m", "learner", "eval", "--config", str(REPO / "configs" / "demo.py"),
                          f"--config.workdir={workdir}", "--checkpoint", str(tmp_path / "nope")],
                         cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "does not exist" in bad.stderr
