"""One ``evalfarm serve`` on loopback, started, owned and reaped by the calling process.

For the learner's local farm, the benchmarks and scripts: the daemon runs in its own session
(``stop`` ends its whole process group: judges, workers, builds), with ``--port 0`` (the port it
picked is read from its stdout) and ``--exit-with-parent`` (it drains and exits if its owner dies,
even by SIGKILL).

    with LocalDaemon(device="cpu", slots=1, cache_dir=path, log_path=path / "daemon.log") as d:
        client = FarmClient([d.endpoint])
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from evalfarm.server.cli import wait_for_listening_port


class LocalDaemonError(RuntimeError):
    """The daemon did not start; the message names its log."""


class LocalDaemon:
    """``device`` is "cpu" (``slots`` CPU slots) or "cuda" (every GPU, one slot each)."""

    def __init__(self, *, device: str = "cpu", slots: int = 1, cache_dir: str | Path,
                 log_path: str | Path | None = None, args: Sequence[str] = (),
                 start_timeout_s: float = 120.0, log_level: str = "WARNING",
                 env: dict[str, str] | None = None, allow_weak_sandbox: bool = False) -> None:
        """``allow_weak_sandbox``: start even where candidates cannot have the strong sandbox
        (``evalfarm serve --allow-weak-sandbox``); without it such a host refuses to start it."""
        if device not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        cmd = [sys.executable, "-m", "evalfarm", "serve", "--port", "0", "--host", "127.0.0.1",
               "--cache-dir", str(cache_dir), "--log-level", log_level, "--exit-with-parent"]
        cmd += ["--gpus", "all"] if device == "cuda" else ["--device", "cpu", "--slots", str(slots)]
        cmd += ["--allow-weak-sandbox"] if allow_weak_sandbox else []
        cmd += list(args)
        self.device = device
        self.log_path = Path(log_path) if log_path is not None else None
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.log_path, "a") as err:  # the child keeps its own descriptor
                self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True,
                                             start_new_session=True, env=env)
        else:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                         start_new_session=True, env=env)
        port = wait_for_listening_port(self.proc, start_timeout_s)
        if port is None:
            try:  # its stdout ended: it is exiting, or it did not listen in time
                code: int | None = self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                code = None
            self.stop()
            where = f"; see {self.log_path}" if self.log_path is not None else ""
            state = f"it exited with code {code}" if code is not None else f"it did not listen within {start_timeout_s:.0f} s"
            raise LocalDaemonError(f"the local farm daemon did not start: {state}{where}")
        self.port = port
        self.endpoint = f"127.0.0.1:{port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM the daemon's process group (a drain), SIGKILL it after ``timeout_s``; reap it."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=max(0.1, timeout_s))
            except subprocess.TimeoutExpired:
                self.kill()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return self.proc.returncode

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)

    def __enter__(self) -> LocalDaemon:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stop_all(daemons: Sequence[LocalDaemon], timeout_s: float = 30.0) -> None:
    """Drain several daemons at once (SIGTERM all, then wait on each within one shared deadline)."""
    for d in daemons:
        if d.proc.poll() is None:
            try:
                os.killpg(d.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + timeout_s
    for d in daemons:
        d.stop(timeout_s=max(0.1, deadline - time.monotonic()))
