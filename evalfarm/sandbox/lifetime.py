"""Nothing of an evaluation outlives it: its directories, and its processes.

Every evaluation (and every build) gets one *run directory* under the temp root; everything the
judge, the workers and the build runner write goes under it (arenas are unnamed memfds, not
files: evalfarm.judge.arena). The owner (the daemon's or the API caller's process) holds an
exclusive ``flock`` on ``<run dir>/.lock`` for as long as the run lives and removes the directory
when it ends, however it ends. A run whose owner died (a daemon SIGKILL) leaves
its lock free: ``sweep`` removes such leftovers, and the daemon calls it when it starts.

``kill_descendants`` is for a child subreaper (the judge): every process below it, including
ones that started a new session and were orphaned, is SIGKILLed and reaped.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import signal
import tempfile
import time
import uuid

from evalfarm.sandbox.procfs import stat_fields

log = logging.getLogger(__name__)

PREFIX = "evalfarm-run-"
class RunDir:
    """A locked, private directory for one evaluation or build."""

    def __init__(self, kind: str, root: str | None = None) -> None:
        self.root = root or tempfile.gettempdir()
        self.name = f"{PREFIX}{kind}-{uuid.uuid4().hex[:12]}"
        self.path = os.path.join(self.root, self.name)
        os.mkdir(self.path, 0o711)  # others may traverse (an unprivileged worker), not list
        os.chmod(self.path, 0o711)
        self._lock_fd: int | None = _lock(self.path)

    def env(self) -> dict[str, str]:
        """What a child needs to put its files here."""
        return {"TMPDIR": self.path}

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> RunDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _lock(path: str) -> int:
    fd = os.open(os.path.join(path, ".lock"), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def _owner_alive(run_path: str) -> bool:
    """Whether some live process still holds the run's lock."""
    try:
        fd = os.open(os.path.join(run_path, ".lock"), os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        # A run being created right now has its lock within microseconds; one without a lock for
        # a minute is a leftover.
        try:
            return time.time() - os.stat(run_path).st_mtime < 60
        except OSError:
            return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def sweep(root: str | None = None) -> list[str]:
    """Remove the run directories whose owner is gone; returns what was removed."""
    root = root or tempfile.gettempdir()
    removed: list[str] = []
    try:
        names = [n for n in os.listdir(root) if n.startswith(PREFIX)]
    except OSError:
        names = []
    for name in names:
        path = os.path.join(root, name)
        if os.path.isdir(path) and not _owner_alive(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    if removed:
        log.info("removed %d leftover run directories of ended evaluations", len(removed))
    return removed


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = stat_fields(entry)
        if fields is not None and len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def descendants(pid: int) -> list[int]:
    return _subtree(_children_map(), pid)


def _subtree(children: dict[int, list[int]], pid: int) -> list[int]:
    out: list[int] = []
    stack = list(children.get(pid, []))
    while stack:
        p = stack.pop()
        out.append(p)
        stack.extend(children.get(p, []))
    return out


def kill_descendants(rounds: int = 20, spare_roots: tuple[int, ...] | list[int] = ()) -> int:
    """SIGKILL every descendant of this process and reap them; returns how many were killed.
    ``spare_roots``: children of this process kept alive with everything below them (a task
    window's next workers, started by this process; an orphan re-parented here is never below them)."""
    me = os.getpid()
    killed = 0
    for _ in range(rounds):
        children = _children_map()
        pids = _subtree(children, me)
        if spare_roots:
            spared = {*spare_roots, *(q for root in spare_roots for q in _subtree(children, root))}
            pids = [p for p in pids if p not in spared]
        if not pids:
            break
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                if spare_roots and not any(os.path.exists(f"/proc/{p}") for p in pids):
                    break  # every killed one is reaped: only the spared children are left, alive
                time.sleep(0.01)
    return killed
