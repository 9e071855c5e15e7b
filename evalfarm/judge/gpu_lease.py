"""One evaluation at a time on a GPU, host-wide.

Two evaluations on one GPU time each other's kernels: the reference's quiet-GPU wait sees the
other evaluation's work as the candidate's lingering work, and every call is slowed by whatever
else runs. A daemon gives each GPU one slot, but a kernel engineer's ``evalfarm score`` next to a
daemon, two daemons given the same GPU, or a test run with several workers share one. So a judge
holds a *lease* on its GPU for its whole evaluation: an exclusive ``flock`` on a file named by
the GPU's UUID in a host-wide directory (``/tmp/evalfarm-gpu-leases``, or ``$EVALFARM_LEASE_DIR``).
The kernel drops the lock when the judge's file descriptor closes, so a killed judge never
leaves a lease behind. A wait is bounded; the evidence records how long it took.

Processes outside the farm do not take leases; the judge finds them by their effect (a GPU that
stays busy after the candidate's process is killed) and answers INFRA_ERROR, not a verdict on
the candidate. Containers with private ``/tmp`` directories see each other's leases only when
they share the lease directory (mount one host directory there and name it in
``$EVALFARM_LEASE_DIR``).
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import re
import time
from collections.abc import Callable

from evalfarm.sandbox.procfs import cmdline

LEASE_DIR_ENV = "EVALFARM_LEASE_DIR"
DEFAULT_LEASE_DIR = "/tmp/evalfarm-gpu-leases"
POLL_S = 0.05


class LeaseTimeout(Exception):
    """The GPU stayed leased by another evaluation for longer than the wait allowed."""


@dataclasses.dataclass
class GpuLease:
    """A held lease: released by ``release()`` or when the process ends."""

    gpu: str
    path: str
    fd: int
    waited_s: float

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing the only descriptor of the open file drops the flock
            self.fd = -1


def lease_dir() -> str:
    return os.environ.get(LEASE_DIR_ENV) or DEFAULT_LEASE_DIR


def lease_path(gpu: str, directory: str | None = None) -> str:
    """The lock file of the GPU named ``gpu`` (a UUID, or any id): one safe file name per id."""
    if not gpu:
        raise ValueError("a GPU lease needs the GPU's id")
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", gpu)
    return os.path.join(directory or lease_dir(), f"{name}.lock")


def _open_lock_file(path: str) -> int:
    directory = os.path.dirname(path)
    try:
        os.mkdir(directory)
        os.chmod(directory, 0o1777)  # every user's evaluations lease the same GPUs (sticky: none removes another's)
    except FileExistsError:
        pass
    # Read-only is enough for flock, so a lock file another user created can still be locked.
    return os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)


def holders(path: str) -> list[int]:
    """The processes holding a flock on ``path`` now, from /proc/locks ([] where unknown)."""
    try:
        st = os.stat(path)
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) < 6 or "->" in parts or parts[1] != "FLOCK":
            continue
        try:
            major, minor, ino = parts[5].split(":")
            pid = int(parts[4])
            same = (int(major, 16), int(minor, 16), int(ino)) == (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
        except ValueError:
            continue
        if same:
            out.append(pid)
    return out


def describe(pids: list[int]) -> str:
    """'pid 12 (python3 -m evalfarm.judge.launch ...)' for each holder, as far as /proc tells."""
    if not pids:
        return "a process this one cannot see"
    described = []
    for pid in pids:
        cmd = cmdline(pid).decode("utf-8", "replace").strip()
        described.append(f"pid {pid} ({cmd[:120]})" if cmd else f"pid {pid}")
    return ", ".join(described)


def acquire(gpu: str, timeout_s: float, on_wait: Callable[[str], None] | None = None,
            directory: str | None = None, clock: Callable[[], float] = time.monotonic) -> GpuLease:
    """Take the lease on ``gpu``, waiting at most ``timeout_s``. ``on_wait(holders)`` is called
    once, when the lease is held by another process (with who holds it). Raises LeaseTimeout."""
    path = lease_path(gpu, directory)
    fd = _open_lock_file(path)
    start = clock()
    told = False
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return GpuLease(gpu, path, fd, clock() - start)
            except BlockingIOError:
                pass
            if not told:
                told = True
                if on_wait is not None:
                    on_wait(describe(holders(path)))
            if clock() - start >= timeout_s:
                raise LeaseTimeout(
                    f"GPU {gpu} stayed in use by another evaluation on this host for {timeout_s:.0f} s "
                    f"(its lease {path} is held by {describe(holders(path))}); give each daemon its own "
                    "GPUs, or raise gpu_lease_timeout_s")
            time.sleep(POLL_S)
    except BaseException:
        os.close(fd)
        raise
