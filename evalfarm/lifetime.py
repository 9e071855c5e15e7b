"""Nothing of an evaluation outlives it: its directories, and its processes.

Every evaluation (and every build) gets one *run directory* under the temp root and, for the
judge's shared-memory arenas, a twin under ``/dev/shm``; everything the judge, the workers and
the build runner write goes under them. The owner (the daemon's or the API caller's process)
holds an exclusive ``flock`` on ``<run dir>/.lock`` for as long as the run lives and removes
both directories when it ends, however it ends. A run whose owner died (a daemon SIGKILL) leaves
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

log = logging.getLogger(__name__)

PREFIX = "evalfarm-run-"
SHM_ROOT = "/dev/shm"
SHM_ENV = "EVALFARM_SHM_DIR"


def _shm_root() -> str | None:
    return SHM_ROOT if os.path.isdir(SHM_ROOT) and os.access(SHM_ROOT, os.W_OK) else None


class RunDir:
    """A locked, private directory (and its /dev/shm twin) for one evaluation or build."""

    def __init__(self, kind: str, root: str | None = None) -> None:
        self.root = root or tempfile.gettempdir()
        self.name = f"{PREFIX}{kind}-{uuid.uuid4().hex[:12]}"
        self.path = os.path.join(self.root, self.name)
        os.mkdir(self.path, 0o711)  # others may traverse (an unprivileged worker), not list
        os.chmod(self.path, 0o711)
        self._lock_fds = [_lock(self.path)]
        shm = _shm_root()
        self.shm_path: str | None = None
        if shm is not None:
            self.shm_path = os.path.join(shm, self.name)
            os.mkdir(self.shm_path, 0o711)
            self._lock_fds.append(_lock(self.shm_path))

    def env(self) -> dict[str, str]:
        """What a child needs to put its files here (TMPDIR, and the arena directory)."""
        env = {"TMPDIR": self.path}
        if self.shm_path:
            env[SHM_ENV] = self.shm_path
        return env

    def close(self) -> None:
        for p in (self.path, self.shm_path):
            if p:
                shutil.rmtree(p, ignore_errors=True)
        for fd in self._lock_fds:
            os.close(fd)
        self._lock_fds = []

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


def sweep(root: str | None = None, shm_root: str | None = SHM_ROOT) -> list[str]:
    """Remove the run directories (and /dev/shm twins) whose owner is gone; returns what was removed."""
    root = root or tempfile.gettempdir()
    removed: list[str] = []
    for base in (root, shm_root):
        if not base or not os.path.isdir(base):
            continue
        try:
            names = [n for n in os.listdir(base) if n.startswith(PREFIX)]
        except OSError:
            continue
        for name in names:
            path = os.path.join(base, name)
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
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: the fields start after the last ')'.
        fields = data[data.rfind(b")") + 2:].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def descendants(pid: int) -> list[int]:
    children = _children_map()
    out: list[int] = []
    stack = list(children.get(pid, []))
    while stack:
        p = stack.pop()
        out.append(p)
        stack.extend(children.get(p, []))
    return out


def kill_descendants(rounds: int = 20) -> int:
    """SIGKILL every descendant of this process and reap them; returns how many were killed."""
    me = os.getpid()
    killed = 0
    for _ in range(rounds):
        pids = descendants(me)
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
                time.sleep(0.01)
    return killed
