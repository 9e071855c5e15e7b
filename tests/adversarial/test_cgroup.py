"""Per-worker cgroups (evalfarm.sandbox.cgroup): a memory total across a candidate's processes, one kill,
nothing left behind. Skipped where this host lets no cgroup be made (not root, no delegation)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from attack_scoring import RUNTIME, score_attack

from evalfarm import ScoreConfig, Verdict
from evalfarm.sandbox import cgroup
from evalfarm.scoring import as_task

_probe, WHY_NOT = cgroup.create("probe")
if _probe is not None:
    _probe.remove()
needs_cgroup = pytest.mark.skipif(_probe is None, reason=WHY_NOT)


@needs_cgroup
def test_a_cgroup_counts_a_process_tree_kills_it_whole_and_goes_away():
    cg, note = cgroup.create("test")
    assert cg is not None, note
    cg.set_limits(256 << 20, 64)
    fds = cg.join_fds()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", "import subprocess, sys, time\n"
             "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
             "print('up', flush=True); time.sleep(60)"],
            stdout=subprocess.PIPE, text=True, preexec_fn=lambda: cgroup.join(fds))
    finally:
        for fd in fds:
            os.close(fd)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    deadline = time.monotonic() + 5
    while len(cg.pids()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(cg.pids()) == 2  # the detached grandchild is counted too
    cg.remove()
    assert proc.wait(5) == -signal.SIGKILL
    assert not any(os.path.exists(d) for d in cg.dirs)


@needs_cgroup
def test_the_oom_killer_acts_on_the_tree_and_is_counted():
    cg, _ = cgroup.create("test")
    assert cg is not None
    cg.set_limits(128 << 20, 64)
    fds = cg.join_fds()
    try:
        code = subprocess.run([sys.executable, "-c", "b = bytearray(512 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1"],
                              preexec_fn=lambda: cgroup.join(fds), check=False, timeout=60).returncode
    finally:
        for fd in fds:
            os.close(fd)
        oom = cg.oom_kills()
        cg.remove()
    assert code == -signal.SIGKILL and oom >= 1


@needs_cgroup
def test_sweep_removes_cgroups_of_judges_that_are_gone():
    dead = subprocess.Popen(["true"])
    dead.wait()
    parent = os.path.dirname(cgroup.create("probe")[0].dirs[0])  # type: ignore[union-attr]
    for entry in os.listdir(parent):
        if entry.startswith("evalfarm-") and "-probe-" in entry:
            os.rmdir(os.path.join(parent, entry))
    stale = os.path.join(parent, f"evalfarm-{dead.pid}-candidate-0123abcd")
    mine = os.path.join(parent, f"evalfarm-{os.getpid()}-candidate-0123abcd")
    os.mkdir(stale)
    os.mkdir(mine)
    try:
        assert cgroup.sweep() >= 1
        assert not os.path.exists(stale) and os.path.exists(mine)  # a living judge's stays
    finally:
        for path in (stale, mine):
            if os.path.exists(path):
                os.rmdir(path)


@needs_cgroup
def test_memory_spread_over_processes_stops_at_the_evaluations_limit(data_dir, build_pool):
    # Finding 8: each of 4 processes holds 400 MB, under the 1 GiB address-space limit each; the
    # cgroup holds their total to 1 GiB, so they cannot all hold theirs.
    task = as_task(str(data_dir / "task_scale.py"))
    cfg = ScoreConfig(num_correctness_inputs=10, timing_budget_s=0.5, min_timed_rounds=10,
                      memory_limit_bytes=1 << 30)
    r = score_attack(task, RUNTIME / "memory_spread.py", build_pool, cfg)
    # The OOM killer ends the largest process of the tree: the worker itself (its verdict says
    # why) or one of the children (the candidate sees it killed).
    if r.verdict is Verdict.RUNTIME_ERROR:
        assert "passed their memory limit (the cgroup's OOM killer ended one)" in r.detail, r.detail
    else:
        assert r.verdict is Verdict.LOAD_ERROR and "SPREAD " in r.detail, (r.verdict, r.detail)
        found = json.loads(r.detail.rsplit("SPREAD ", 1)[1].split(" END", 1)[0])
        assert -signal.SIGKILL in found["codes"], found
        assert any("per worker: memory 1024 MiB in total" in n for n in r.evidence.isolation), r.evidence.isolation


BUILD_HOG = '''
import os
import time

import torch
from torch.utils.cpp_extension import load_inline  # noqa: F401 - the build step imports this module


def fill(n):
    b = bytearray(n)
    for i in range(0, n, 4096):
        b[i] = 1
    return b


# At import, in the build's discover step: three processes of 400 MiB each, every one of them far
# under the compiler's per-process limit, together over the pool's total. CHILDREN of them are
# forked; the importing process itself holds the rest (none where CHILDREN is 3, so the OOM killer
# ends a child and the importer would sleep on past the build's deadline).
for _ in range(CHILDREN):
    if os.fork() == 0:
        keep = fill(400 << 20)
        time.sleep(60)
        os._exit(0)
if CHILDREN < 3:
    keep = fill(400 << 20)
time.sleep(60)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return x
'''


@needs_cgroup
@pytest.mark.parametrize("children", [2, 3], ids=["importer-holds-a-share", "children-hold-all"])
def test_a_builds_processes_together_are_held_to_the_pools_memory_total(tmp_path, monkeypatch, children):
    # The OOM killer ends the tree's largest process. Where that is not the build's own process,
    # the build is still over at once: the pool ends it when the cgroup counts a kill (a survivor
    # sleeping on made it a timeout at the build's deadline).
    from evalfarm.build import BuildPool

    made: list[cgroup.Cgroup] = []
    real_create = cgroup.create

    def create(role):
        cg, why = real_create(role)
        if cg is not None:
            made.append(cg)
        return cg, why

    monkeypatch.setattr(cgroup, "create", create)
    pool = BuildPool(max_workers=1, cache_dir=tmp_path / "cache", timeout_s=50, memory_limit_bytes=1 << 30)
    try:
        t0 = time.monotonic()
        report = pool.build(BUILD_HOG.replace("CHILDREN", str(children)), "cpu")
    finally:
        pool.close()
    assert report.status == "error", report
    assert "together passed 1 GiB of memory (the cgroup's OOM killer ended one)" in report.log, report.log
    assert time.monotonic() - t0 < 45  # ended by the kill, not by the build's deadline
    assert made and not any(os.path.exists(d) for cg in made for d in cg.dirs)  # each removed


def test_a_v1_cgroup_that_cannot_be_made_is_a_note_not_a_crash(tmp_path, monkeypatch):
    # A daemon that may not write the v1 hierarchies (not root, nothing delegated): the first
    # controller's directory cannot be made. That must leave the worker without a cgroup, with
    # the reason, not end the judge (every evaluation came back INFRA_ERROR that way).
    monkeypatch.setenv(cgroup.SWITCH_ENV, "1")
    monkeypatch.setattr(cgroup, "ROOT", str(tmp_path))  # no cgroup.controllers: the v1 path
    monkeypatch.setattr(cgroup, "_own", lambda controller: "/proc/self")  # mkdir there always fails
    cg, note = cgroup.create("reference")
    assert cg is None and note.startswith("no cgroup: cannot make a v1 memory cgroup"), note
    # The second controller fails after the first was made: the first is removed again.
    memory = tmp_path / "memory"
    memory.mkdir()
    monkeypatch.setattr(cgroup, "_own", lambda controller: str(memory) if controller == "memory" else "/proc/self")
    cg, note = cgroup.create("candidate")
    assert cg is None and note.startswith("no cgroup: cannot make a v1 pids cgroup"), note
    assert list(memory.iterdir()) == []


BUSY = "import os, time\nend = time.time() + {wall}\nfor _ in range(3):\n    if os.fork() == 0:\n        break\n" \
       "while time.time() < end:\n    pass\n"


@pytest.mark.skipif(_probe is None or not _probe.has_cpu, reason="no cpu controller here")
def test_a_tree_of_busy_processes_is_held_to_its_cpu_quota():
    # Four processes spinning for 1.5 s would take every core of the host (several seconds of
    # CPU); under a quarter of a core, the tree gets about 0.4 s of CPU in all.
    cg, _ = cgroup.create("test")
    assert cg is not None and cg.has_cpu
    cg.set_limits(None, 64, cpu_cores=0.25)
    fds = cg.join_fds()
    wall = 1.5
    try:
        before = os.times()
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-c", BUSY.format(wall=wall) +
                                 "\nimport os\ntry:\n    while True: os.wait()\nexcept ChildProcessError: pass\n"],
                                preexec_fn=lambda: cgroup.join(fds))
        assert proc.wait(30) == 0
        elapsed = time.monotonic() - t0
        after = os.times()
    finally:
        for fd in fds:
            os.close(fd)
        throttled = cg.cpu_throttled()
        cg.remove()
    used = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    assert throttled > 0
    # The quota's share of the wall time, plus one period of slack and the interpreter's start.
    assert used <= 0.25 * elapsed + 0.35, (used, elapsed)


@needs_cgroup
def test_an_evaluations_workers_get_a_cpu_quota_and_say_so(data_dir, build_pool):
    from evalfarm.judge.setup import worker_cpu_cores

    task = as_task(str(data_dir / "task_scale.py"))
    cfg = ScoreConfig(num_correctness_inputs=10, timing_budget_s=0.5, min_timed_rounds=10)
    r = score_attack(task, data_dir / "cand_same.py", build_pool, cfg)
    assert r.verdict is Verdict.OK, r.detail
    notes = [n for n in r.evidence.isolation if "per worker:" in n]
    assert notes, r.evidence.isolation
    if _probe.has_cpu:
        import re

        found = [re.search(r"processes and threads, CPU (\d+) cores$", n) for n in notes]
        assert all(found), notes
        # The evaluation's threads plus one, never more than the host has.
        assert all(1 <= int(m.group(1)) <= (os.cpu_count() or 1) for m in found), notes
    else:
        assert all("CPU" not in n for n in notes), notes
    assert worker_cpu_cores(1) == min(2, os.cpu_count() or 1) and worker_cpu_cores(10_000) == os.cpu_count()


@needs_cgroup
def test_a_child_that_leaves_the_candidates_process_group_is_hack_detected(data_dir, build_pool):
    # Stopping the candidate stops its process group; a setsid() child would run on while the
    # reference is timed. Its cgroup still lists it, outside the group: the judge refuses it.
    task = as_task(str(data_dir / "task_scale.py"))
    cfg = ScoreConfig(num_correctness_inputs=10, timing_budget_s=0.5, min_timed_rounds=10)
    r = score_attack(task, RUNTIME / "escaped_child.py", build_pool, cfg)
    assert r.verdict is Verdict.HACK_DETECTED and "guard escaped_process" in r.detail, (r.verdict, r.detail)
