"""The judge's launcher (evalfarm.judge.launch) starts the workers before the judge imports torch."""

from __future__ import annotations

import subprocess
import sys
import time

from evalfarm.judge import framing
from evalfarm.judge.standby import JudgeProcess


def test_the_launcher_and_the_worker_starter_import_no_torch():
    code = ("import sys; import evalfarm.judge.launch, evalfarm.judge.worker_processes, evalfarm.judge.roles; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False", "the launcher imports torch before it starts the workers"


def test_workers_are_started_before_the_judge_has_imported_itself():
    judge = JudgeProcess("cpu", request_timeout_s=60)
    try:
        worker_seen: list[float] = []
        ready = None
        deadline = time.monotonic() + 90
        while ready is None and time.monotonic() < deadline:
            if not judge.conn.poll(0.05):
                continue
            msg = framing.recv_json(judge.conn, 0)
            if msg.get("op") == "worker":
                worker_seen.append(time.monotonic())
            elif msg.get("op") == "standby_ready":
                ready = msg
        assert ready is not None, "the judge never said ready"
        assert len(worker_seen) == 2
        # Both workers were reported (spawned) before the judge's own imports were done.
        assert max(worker_seen) < ready["main_at"], (worker_seen, ready)
        assert ready["main_at"] <= ready["at"]
    finally:
        judge.close()
