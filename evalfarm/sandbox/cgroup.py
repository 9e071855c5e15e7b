"""A cgroup per worker, where the host lets us make one: a memory total, a process count, a CPU
quota, one kill.

rlimits bound each process; a cgroup bounds a process tree: the memory of every process a
candidate starts counts against one limit (the kernel's OOM killer ends the tree's largest
process when it is passed), the number of processes and threads against another, their CPU use
against a quota of cores (a tree of busy processes cannot take the host's other cores from a
neighbouring evaluation's timed calls), and every process in it can be killed at once. The judge makes one for each worker before starting it
(the worker joins it before it runs anything: ``Popen(preexec_fn=...)``), sets its limits when
the evaluation's request arrives, reads whether the OOM killer acted when a worker dies, and
removes it when the evaluation ends. Directories left by a judge that was killed are removed by
the next ``sweep``.

Both hierarchies are handled: cgroup v2 (a child of the judge's own cgroup, which needs the
``memory`` and ``pids`` controllers delegated to it) and cgroup v1 (children of the judge's
``memory`` and ``pids`` cgroups). The ``cpu`` controller is used where it is there too (v2:
delegated; v1: its own hierarchy); without it the cgroup has no CPU quota and says so. Where neither can be made (not root, no delegation, a read-only
``/sys/fs/cgroup``), ``create`` returns None and a note saying why; nothing else changes.
``EVALFARM_CGROUP=0`` turns cgroups off.
"""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
import signal
import time

ROOT = "/sys/fs/cgroup"
PREFIX = "evalfarm-"
V1_CONTROLLERS = ("memory", "pids")
CPU_CONTROLLER = "cpu"  # optional: a quota where it is there
CPU_PERIOD_US = 100_000
SWITCH_ENV = "EVALFARM_CGROUP"
_NAME = re.compile(rf"^{PREFIX}(\d+)-[a-z]+-[0-9a-f]+$")


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _stat(path: str, key: str) -> int:
    """The value of ``key`` in a cgroup file of "key value" lines; 0 where it is not there."""
    try:
        for line in _read(path).splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _own(controller: str | None) -> str | None:
    """This process's cgroup directory: v2 (controller None) or the v1 hierarchy of ``controller``."""
    try:
        lines = _read("/proc/self/cgroup").splitlines()
    except OSError:
        return None
    for line in lines:
        ident, _, rest = line.partition(":")
        names, _, rel = rest.partition(":")
        if controller is None and ident == "0" and names == "":
            path = ROOT + rel
        elif controller is not None and controller in names.split(","):
            path = os.path.join(ROOT, controller) + rel
        else:
            continue
        return path.rstrip("/") or ROOT
    return None


@dataclasses.dataclass
class Cgroup:
    version: int
    dirs: list[str]  # v2: one; v1: one per controller (memory, pids, then cpu where it is there)
    has_cpu: bool = False  # the cpu controller is there: set_limits can set a quota

    @property
    def memory_dir(self) -> str:
        return self.dirs[0]

    def join_fds(self) -> list[int]:
        """Descriptors of the ``cgroup.procs`` files, opened now; writing "0" to each moves the
        writer into the cgroup (a child does this before it runs anything: ``join``)."""
        return [os.open(os.path.join(d, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC) for d in self.dirs]

    def set_limits(self, memory_bytes: int | None, max_pids: int | None, cpu_cores: float | None = None) -> None:
        """Limits on the totals of the tree: memory (bytes), processes and threads, and CPU use
        (cores' worth of time per period; ignored where the cpu controller is not there)."""
        quota = max(1000, int(cpu_cores * CPU_PERIOD_US)) if cpu_cores is not None and self.has_cpu else None
        if self.version == 2:
            if memory_bytes is not None:
                _write(os.path.join(self.dirs[0], "memory.max"), str(memory_bytes))
                swap = os.path.join(self.dirs[0], "memory.swap.max")
                if os.path.exists(swap):
                    _write(swap, "0")
            if max_pids is not None:
                _write(os.path.join(self.dirs[0], "pids.max"), str(max_pids))
            if quota is not None:
                _write(os.path.join(self.dirs[0], "cpu.max"), f"{quota} {CPU_PERIOD_US}")
            return
        memory, pids = self.dirs[:2]
        if memory_bytes is not None:
            _write(os.path.join(memory, "memory.limit_in_bytes"), str(memory_bytes))
        if max_pids is not None:
            _write(os.path.join(pids, "pids.max"), str(max_pids))
        if quota is not None:
            _write(os.path.join(self.dirs[2], "cpu.cfs_period_us"), str(CPU_PERIOD_US))
            _write(os.path.join(self.dirs[2], "cpu.cfs_quota_us"), str(quota))

    def cpu_throttled(self) -> int:
        """How many periods its processes were held back by the CPU quota (0 without one)."""
        return _stat(os.path.join(self.dirs[-1], "cpu.stat"), "nr_throttled") if self.has_cpu else 0

    def pids(self) -> list[int]:
        if not self.dirs:  # a v1 cgroup whose first controller's directory could not be made
            return []
        try:
            return [int(p) for p in _read(os.path.join(self.dirs[0], "cgroup.procs")).split()]
        except OSError:
            return []

    def oom_kills(self) -> int:
        """How many processes of this cgroup the OOM killer ended."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        return _stat(os.path.join(self.memory_dir, name), "oom_kill")

    def kill(self, timeout_s: float = 5.0) -> None:
        """SIGKILL every process in it (``cgroup.kill`` where the kernel has it)."""
        if self.version == 2 and os.path.exists(os.path.join(self.dirs[0], "cgroup.kill")):
            try:
                _write(os.path.join(self.dirs[0], "cgroup.kill"), "1")
            except OSError:
                pass
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            left = self.pids()
            if not left:
                return
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.02)

    def remove(self) -> None:
        """Kill what is left and remove the directories (retried while the last processes exit)."""
        self.kill()
        for d in self.dirs:
            for _ in range(50):
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def join(fds: list[int]) -> None:
    """In a child before exec: move this process into the cgroup(s) (``Cgroup.join_fds``)."""
    for fd in fds:
        os.write(fd, b"0")


def create(role: str) -> tuple[Cgroup | None, str]:
    """A new, empty cgroup for one worker (no limits yet); (None, why) where none can be made."""
    if os.environ.get(SWITCH_ENV, "1") == "0":
        return None, f"no cgroup: turned off ({SWITCH_ENV}=0)"
    name = f"{PREFIX}{os.getpid()}-{role}-{secrets.token_hex(4)}"
    if os.path.exists(os.path.join(ROOT, "cgroup.controllers")):
        return _create_v2(name)
    return _create_v1(name)


def _create_v2(name: str) -> tuple[Cgroup | None, str]:
    parent = _own(None)
    if parent is None:
        return None, "no cgroup: this process's cgroup v2 directory is unknown"
    try:
        enabled = _read(os.path.join(parent, "cgroup.subtree_control")).split()
        missing = [c for c in V1_CONTROLLERS if c not in enabled]
        if missing:
            _write(os.path.join(parent, "cgroup.subtree_control"), " ".join(f"+{c}" for c in missing))
        path = os.path.join(parent, name)
        os.mkdir(path)
    except OSError as err:
        return None, f"no cgroup: cgroup v2 {parent} not delegated here ({err.strerror or err})"
    has_cpu = CPU_CONTROLLER in enabled
    if not has_cpu:
        try:
            _write(os.path.join(parent, "cgroup.subtree_control"), f"+{CPU_CONTROLLER}")
            has_cpu = True
        except OSError:
            pass
    has_cpu = has_cpu and os.path.exists(os.path.join(path, "cpu.max"))
    return Cgroup(2, [path], has_cpu), "cgroup v2" + ("" if has_cpu else " (no cpu controller: no CPU quota)")


def _create_v1(name: str) -> tuple[Cgroup | None, str]:
    made: list[str] = []
    for controller in V1_CONTROLLERS:
        parent = _own(controller)
        if parent is None or not os.path.isdir(parent):
            Cgroup(1, made).remove()
            return None, f"no cgroup: no v1 {controller} hierarchy"
        path = os.path.join(parent, name)
        try:
            os.mkdir(path)
        except OSError as err:
            Cgroup(1, made).remove()
            return None, f"no cgroup: cannot make a v1 {controller} cgroup ({err.strerror or err})"
        made.append(path)
    parent = _own(CPU_CONTROLLER)
    if parent is not None and os.path.exists(os.path.join(parent, "cpu.cfs_quota_us")):
        try:
            os.mkdir(os.path.join(parent, name))
            made.append(os.path.join(parent, name))
            return Cgroup(1, made, True), "cgroup v1"
        except OSError:
            pass
    return Cgroup(1, made), "cgroup v1 (no cpu hierarchy: no CPU quota)"


def sweep() -> int:
    """Remove the cgroups of judges that are gone (empty once their processes died); how many."""
    parents = {p for p in [_own(None), *(_own(c) for c in (*V1_CONTROLLERS, CPU_CONTROLLER))]
               if p and os.path.isdir(p)}
    removed = 0
    for parent in parents:
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        for entry in names:
            m = _NAME.match(entry)
            if m is None or _alive(int(m.group(1))):
                continue
            path = os.path.join(parent, entry)
            try:
                os.rmdir(path)
                removed += 1
            except OSError:
                pass
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
