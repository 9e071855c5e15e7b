"""A daemon keeps judges started ahead (--warm-judges), uses each once, and takes them down with it."""

from __future__ import annotations

import os
import signal
import urllib.request
from pathlib import Path

import grpc
import pytest

from evalfarm.tasks import builtin_suite
from evalfarm.v1 import evalfarm_pb2 as pb
from evalfarm.v1 import evalfarm_pb2_grpc as pb_grpc

from .conftest import TINY, descendants, free_port, process_state, request, wait_until


def _judges(pid: int) -> list[int]:
    found = []
    for p in descendants(pid):
        try:
            if b"evalfarm.judge.launch" in Path(f"/proc/{p}/cmdline").read_bytes():
                found.append(p)
        except OSError:
            continue
    return found


def _fast(task: str) -> str:
    return next(v for v in builtin_suite().variants(task) if v.kind == "fast" and v.runs_on("cpu")).load().source


@pytest.mark.long  # a daemon's warm judges through several scores, then SIGKILL: ~20 s on 2 cores
def test_daemon_scores_with_warm_judges_and_a_sigkill_takes_every_standby_down(spawn_daemon, data_dir):
    metrics_port = free_port()
    d = spawn_daemon("--slots", "1", "--warm-judges", "1", "--metrics-port", str(metrics_port))
    # A standby judge before any request.
    assert wait_until(lambda: len(_judges(d.pid)) == 1, 60), d.log()[-2000:]
    standby = _judges(d.pid)[0]
    with grpc.insecure_channel(d.target) as ch:
        reply = pb_grpc.EvalFarmStub(ch).Score(request(_fast("L1/1"), "a", **TINY), timeout=240)
    assert reply.verdict == pb.VERDICT_OK, reply.detail
    # The standby served that evaluation and is gone; a new one stands by.
    assert wait_until(lambda: process_state(standby) in (None, "Z"), 15)
    assert wait_until(lambda: len(_judges(d.pid)) == 1 and _judges(d.pid)[0] != standby, 30)
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    values = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith("evalfarm_judges_")}
    # One take per judge run of the evaluation (a re-verification takes a second one).
    assert values['evalfarm_judges_taken_total{start="warm"}'] >= 1, values
    assert values['evalfarm_judges_taken_total{start="cold"}'] == 0, values
    assert values["evalfarm_judges_standing_by"] == 1, values

    # Now an evaluation in flight and a standby at once; the daemon is SIGKILLed.
    ch = grpc.insecure_channel(d.target)
    req = request((data_dir / "cand_hang.py").read_text(), "hang")
    req.task.source.source = (data_dir / "task_scale.py").read_bytes()
    req.task.source.name = "task_scale"
    fut = pb_grpc.EvalFarmStub(ch).Score.future(req)
    assert wait_until(lambda: len(_judges(d.pid)) == 2, 60), "no judge started for the evaluation"
    tree = descendants(d.pid)
    os.kill(d.pid, signal.SIGKILL)
    d.proc.wait(10)
    assert wait_until(lambda: all(process_state(p) in (None, "Z") for p in tree), 15), \
        [p for p in tree if process_state(p) not in (None, "Z")]
    fut.cancel()
    ch.close()


def test_cpu_slots_start_no_judge_ahead_unless_asked(spawn_daemon):
    d = spawn_daemon("--slots", "1")  # a CPU evaluation uses every core: the default is 0 there
    assert not wait_until(lambda: bool(_judges(d.pid)), 5)


def test_the_default_is_one_standby_per_gpu_slot():
    from evalfarm.server.config import ServerConfig

    assert ServerConfig(devices=("cuda:0", "cuda:1")).standby_judges_per_slot == 1
    assert ServerConfig(devices=("cpu",)).standby_judges_per_slot == 0
    assert ServerConfig(devices=("cpu",), warm_judges=2).standby_judges_per_slot == 2


def test_warm_judges_out_of_range_is_refused(spawn_daemon):
    r = spawn_daemon("--warm-judges", "9", expect_fail=True)
    assert r.returncode != 0 and "--warm-judges must be 0-4" in (r.stderr + r.stdout)
