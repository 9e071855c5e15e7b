"""Fixtures for the daemon and client tests.

- `fake_backend`: a scoring backend with the shape of evalfarm.scoring.start whose
  behaviour is written in the candidate source (`# fake: verdict=OK speedup=2 sleep=0.1`);
  for unit tests of queueing, admission, auth, drain and the client's dispatch logic.
- `DaemonThread`: an in-process daemon on its own event loop in a thread (fake backend).
- `spawn_daemon`: a real `python -m evalfarm.server` subprocess (real scoring backend),
  owned by the test and always reaped; with `--allow-weak-sandbox` only where this host has no
  strong sandbox (tests/sandbox_under_test.py, said in the run's header and summary).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from evalfarm.config import ScoreConfig
from evalfarm.result import Evidence, ScoreResult
from evalfarm.server.cli import wait_for_listening_port
from evalfarm.server.config import ServerConfig
from evalfarm.server.daemon import Daemon
from evalfarm.tasks import Candidate, Task
from evalfarm.v1 import evalfarm_pb2 as pb
from evalfarm.v1 import evalfarm_pb2_grpc as pb_grpc
from evalfarm.verdict import Verdict
from tests.sandbox_under_test import DAEMON_ARGS

REPO = Path(__file__).resolve().parents[2]
TINY = {"num_correctness_inputs": 20, "timing_budget_s": 0.5}


def fake_source(verdict: str = "OK", speedup: float | None = 2.0, sleep: float = 0.0, salt: str = "") -> str:
    spd = "none" if speedup is None else repr(speedup)
    return (
        f"# fake: verdict={verdict} speedup={spd} sleep={sleep} salt={salt}\n"
        "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
    )


class FakeEvaluation:
    """Finishes after `sleep` seconds (on a timer thread) with the verdict in the source; as a real
    evaluation does (evalfarm.eval_budget), TIMEOUT at its deadline when that comes first, unless
    ``stuck`` (an evaluation that hangs in the farm and never reports)."""

    def __init__(self, task: Task, candidate: Candidate, config: ScoreConfig, speedups: dict[str, float],
                 force_verdict: str | None = None, deadline_s: float | None = None, stuck: bool = False,
                 force_detail: str = "", force_cause: str = "") -> None:
        m = re.search(r"# fake: verdict=(\w+) speedup=(\S+) sleep=(\S+)", candidate.source)
        verdict, speedup, sleep = (m.group(1), m.group(2), float(m.group(3))) if m else ("OK", "1.5", 0.0)
        verdict = force_verdict or verdict
        self.config = config
        self.sample_id = candidate.name  # the daemon names a candidate after its sample id
        self.cancelled = False
        self._event = threading.Event()
        spd = None if speedup == "none" else float(speedup)
        spd = speedups.get(config.device, spd) if spd is not None else None
        self._result = ScoreResult(
            verdict=Verdict(verdict), speedup=spd if verdict == "OK" else None,
            detail="" if verdict == "OK" else force_detail or f"fake {verdict}",
            evidence=Evidence(device=config.device, device_name="fake", phases_s={"load": 0.01, "timing": sleep}),
            task=task.name, candidate_sha256=candidate.sha256, infra_cause=force_cause,
        )
        if deadline_s and sleep > deadline_s and not stuck:
            sleep = deadline_s
            self._result = ScoreResult.failure(Verdict.TIMEOUT, f"fake: ran past the deadline of {deadline_s:g} s",
                                               task=task.name, candidate_sha256=candidate.sha256)
        self._timer = threading.Timer(sleep, self._event.set)
        self._timer.daemon = True
        self._timer.start()

    @property
    def done(self) -> bool:
        return self._event.is_set()

    def result(self, timeout: float | None = None) -> ScoreResult:
        if not self._event.wait(timeout):
            raise TimeoutError("fake evaluation still running")
        if self.cancelled:
            return ScoreResult.failure(Verdict.INFRA_ERROR, "cancelled")
        return self._result

    def cancel(self) -> None:
        self.cancelled = True
        self._timer.cancel()
        self._event.set()


@dataclasses.dataclass
class FakeBackend:
    speedups: dict[str, float] = dataclasses.field(default_factory=dict)  # override per device
    started: int = 0
    evaluations: list[FakeEvaluation] = dataclasses.field(default_factory=list)
    force_verdict: str | None = None
    stuck: bool = False  # evaluations ignore their deadline (hung in the farm)
    force_detail: str = ""  # the detail of a forced non-OK verdict
    force_cause: str = ""  # the infra_cause of a forced INFRA_ERROR (evalfarm.infra_cause)

    def __call__(self, task: Task, candidate: Candidate, config: ScoreConfig, build_pool: Any,
                 deadline_s: float | None = None) -> FakeEvaluation:
        ev = FakeEvaluation(task, candidate, config, self.speedups, self.force_verdict, deadline_s, self.stuck,
                            self.force_detail, self.force_cause)
        self.evaluations.append(ev)
        self.started += 1  # counted after the append: a test that sees started == n may read evaluations[n - 1]
        return ev


class DaemonThread:
    """A Daemon with a fake backend on its own event loop in a background thread."""

    def __init__(self, backend: Any = None, build_pool: Any = None, **overrides: Any) -> None:
        self.backend = backend or FakeBackend()
        self.build_pool = build_pool
        defaults: dict[str, Any] = {"host": "127.0.0.1", "port": 0, "devices": ("cpu",), "queue_limit": 4,
                                    "drain_timeout_s": 5.0, "host_label": "fake-host"}
        defaults.update(overrides)
        self.config = ServerConfig(**defaults)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.daemon: Daemon = self.call(self._make())
        self.port = self.daemon.port
        self.target = f"127.0.0.1:{self.port}"
        self._stopped = False

    async def _make(self) -> Daemon:
        daemon = Daemon(self.config, backend=self.backend, build_pool=self.build_pool)
        await daemon.start()
        return daemon

    def call(self, coro: Any, timeout: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stub(self, token: str | None = None) -> tuple[grpc.Channel, pb_grpc.EvalFarmStub]:
        ch = grpc.insecure_channel(self.target)
        return ch, pb_grpc.EvalFarmStub(ch)

    def drain(self, timeout: float = 60.0) -> None:
        if not self._stopped:
            self._stopped = True
            self.call(self.daemon.drain(), timeout)

    def stop(self) -> None:
        try:
            self.drain()
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)


@pytest.fixture
def daemon_factory() -> Iterator[Any]:
    made: list[DaemonThread] = []

    def make(**kwargs: Any) -> DaemonThread:
        d = DaemonThread(**kwargs)
        made.append(d)
        return d

    yield make
    for d in made:
        d.stop()


def request(source: str, sample_id: str = "s1", task: str = "L1/1", **options: Any) -> pb.ScoreRequest:
    return pb.ScoreRequest(
        task=pb.TaskRef(name=task),
        candidate=pb.Candidate(source=source.encode(), sample_id=sample_id),
        options=pb.ScoreOptions(**options),
    )


# -- real daemons in subprocesses ----------------------------------------------------------

class DaemonProcess:
    def __init__(self, proc: subprocess.Popen[str], port: int, log_path: Path) -> None:
        self.proc, self.port, self.log_path = proc, port, log_path
        self.target = f"127.0.0.1:{port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            kill_tree(self.proc.pid)
            return self.proc.wait(10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_state(pid: int) -> str | None:
    """The state letter from /proc/<pid>/stat ("R", "S", "Z", ...), or None once the pid is gone.

    A process can vanish between any two reads of /proc, so every error is "gone".
    """
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def descendants(pid: int) -> list[int]:
    """All descendant pids, from /proc (no psutil)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def kill_tree(pid: int) -> None:
    for p in [pid, *descendants(pid)]:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


@pytest.fixture
def spawn_daemon(tmp_path: Path) -> Iterator[Any]:
    """Start a real daemon subprocess (CPU slots, or `gpus=`; real scoring); every one is stopped and reaped."""
    made: list[DaemonProcess] = []
    counter = iter(range(1000))

    def spawn(*args: str, cache_dir: Path | None = None, expect_fail: bool = False,
              timeout: float = 60.0, gpus: str | None = None) -> DaemonProcess | subprocess.CompletedProcess[str]:
        n = next(counter)
        log_path = tmp_path / f"daemon{n}.log"
        cache = cache_dir or tmp_path / f"cache{n}"
        slots = ["--gpus", gpus] if gpus else ["--device", "cpu"]
        cmd = [sys.executable, "-m", "evalfarm.server", "--port", "0", *slots,
               "--cache-dir", str(cache), *DAEMON_ARGS, *args]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
                   PYTHONUNBUFFERED="1")
        if expect_fail:
            return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
        with open(log_path, "w") as log_file:
            proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=log_file,
                                    text=True, start_new_session=True)
        port = _read_port(proc, timeout, log_path)
        d = DaemonProcess(proc, port, log_path)
        made.append(d)
        return d

    yield spawn
    for d in made:
        d.stop(timeout=30)
        kill_tree(d.pid)  # anything the daemon left behind
        if d.proc.stdout is not None:
            d.proc.stdout.close()


def _read_port(proc: subprocess.Popen[str], timeout: float, log_path: Path) -> int:
    port = wait_for_listening_port(proc, timeout)
    if port is None:
        kill_tree(proc.pid)
        proc.wait(10)
        raise RuntimeError(f"daemon did not start within {timeout}s:\n{log_path.read_text()[-3000:]}")
    return port


def wait_until(pred: Any, timeout: float, interval: float = 0.05) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(interval)
    return bool(pred())
