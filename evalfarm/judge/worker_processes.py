"""The judge's two worker processes (reference and candidate): started in a sandbox of their
own, each in its own session, cgroup and directory, and owned by the judge until it kills them.

No torch here: the judge's launcher (evalfarm.judge.launch) starts the workers first, so their
interpreters, imports and CUDA contexts start up while the judge imports torch itself.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
from typing import Any

from evalfarm import sandbox
from evalfarm.judge import cpu_pinning, framing
from evalfarm.judge.memfd import new_arena_fd
from evalfarm.judge.roles import CANDIDATE, KEPT_DIRS, REFERENCE, STAGED_CACHE, WARM_ENV
from evalfarm.sandbox import bubblewrap, cgroup, confine
from evalfarm.sandbox.procfs import stat_fields


class WorkerHandle:
    """A worker process (reference or candidate): started in its own session, killed as a group."""

    def __init__(self, device: str, tmp: str, role: str, staged_cache: str = "",
                 scratch_bytes: int = sandbox.Limits.file_size_bytes, cpu_core: int | None = None) -> None:
        """``staged_cache``: the directory the judge copies the extensions this worker may load into
        (``STAGED_CACHE``), shown to it read-only; "" for a worker that loads none (the reference)."""
        self.role = role
        # First, before anything is opened: raises SandboxUnavailable when bubblewrap is required
        # and cannot be had.
        bwrap, why_not = bubblewrap.selected(gpu=device.startswith("cuda"))
        self.bubblewrapped = bwrap is not None
        # Its own cgroup where the host allows one (limits set when the request arrives).
        self.cgroup, self.cgroup_note = cgroup.create(role)
        os.makedirs(tmp, exist_ok=True)
        self.conn, child_sock = framing.channel_pair()
        self.stderr_path = os.path.join(tmp, "worker.stderr")
        self._stderr = open(self.stderr_path, "wb")  # a file, so a chatty candidate never blocks on a pipe
        fd = child_sock.fileno()
        # Unnamed memfds this worker alone inherits, sized once the judge knows how large: its input
        # and output arenas on a CPU (a GPU's are device memory), and on every device the staging
        # area through which a timed block's inputs reach it (evalfarm.judge.staging).
        self.arena_fds: dict[str, int] = {"staging": new_arena_fd()}
        if not device.startswith("cuda"):
            self.arena_fds.update({"in": new_arena_fd(), "out": new_arena_fd()})
        extra = {}
        if "EVALFARM_WORKER_NETNS" in os.environ:  # "0" lets a deployment keep the host's network
            extra["EVALFARM_WORKER_NETNS"] = os.environ["EVALFARM_WORKER_NETNS"]
        if device.startswith("cuda"):
            idx = device.split(":")[1] if ":" in device else "0"
            extra["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES_FOR_WORKER", "") or _visible(idx)
            extra[WARM_ENV] = "cuda:0"  # the worker creates its CUDA context before its task is known
        self.started_seen = False  # its {"op": "started"} (interpreter, torch, device context ready) was read
        # The judges' bytecode cache (evalfarm.judge.bytecode), read-only: the worker imports what
        # the judges compiled and writes nothing (PYTHONDONTWRITEBYTECODE, a read-only bind).
        # Not where it is gone (removed under a running daemon): bubblewrap cannot bind what is not there.
        bytecode_dir = sys.pycache_prefix if sys.pycache_prefix and os.path.isdir(sys.pycache_prefix) else ""
        if bytecode_dir:
            extra["PYTHONPYCACHEPREFIX"] = bytecode_dir
        argv = [*sandbox.python_cmd("evalfarm.judge.worker"), str(fd)]
        if bwrap is not None:
            for name in KEPT_DIRS:
                os.makedirs(os.path.join(tmp, name), exist_ok=True)
            # CUDA arenas are attached through files in the host's /dev/shm (see evalfarm.sandbox.bubblewrap).
            host_shm = device.startswith("cuda") and bubblewrap.gpu_shm_handover()
            view = bubblewrap.WorkerView(  # never the daemon's caches, config, token or TLS key
                own_dir=tmp, scratch_bytes=scratch_bytes, keep=KEPT_DIRS,
                readable=tuple(confine.needed_paths() + ([staged_cache] if staged_cache else [])
                               + ([bytecode_dir] if bytecode_dir else [])),
                network=not confine.own_network(),
                devices=bubblewrap.gpu_device_nodes() if device.startswith("cuda") else (),
                shared=bubblewrap.shared_dirs(), host_shm_until_attach=host_shm)
            argv = bubblewrap.command(bwrap, view, argv)
            extra.update(bubblewrap.environment(view))
        else:
            extra[bubblewrap.NOTE_ENV] = why_not
        join_fds = self.cgroup.join_fds() if self.cgroup is not None else []

        def before_exec() -> None:
            # Into its cgroup before it runs anything, so every process it starts is counted
            # there; on its own core, which every thread and process it starts inherits.
            if join_fds:
                cgroup.join(join_fds)
            if cpu_core is not None:
                try:
                    os.sched_setaffinity(0, {cpu_core})
                except OSError:
                    pass  # a core outside its cpuset: unpinned rather than not started

        try:
            self.proc = subprocess.Popen(
                argv,
                pass_fds=(fd, *self.arena_fds.values()), cwd=tmp, env=sandbox.clean_env(tmp, extra),
                start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._stderr,
                preexec_fn=before_exec if join_fds or cpu_core is not None else None,
            )
        except BaseException:
            if self.cgroup is not None:
                self.cgroup.remove()  # no process to count: nothing of it is left behind
            raise
        finally:
            for jfd in join_fds:
                os.close(jfd)
        child_sock.close()

    def note_started(self, msg: dict[str, Any]) -> None:
        if msg.get("op") != "started":
            raise framing.ProtocolError(f"expected the {self.role} worker's start report, got {str(msg.get('op'))[:40]!r}")
        self.started_seen = True

    def signal_group(self, sig: int) -> bool:
        """Send ``sig`` to the worker's whole process group; False when it is gone."""
        try:
            os.killpg(self.proc.pid, sig)
            return True
        except (ProcessLookupError, PermissionError):
            return False

    def exit_description(self) -> str:
        code = self.proc.poll()
        if code is None:
            try:
                code = self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                return f"{self.role} process stopped answering"
        if self.bubblewrapped and bubblewrap.exit_signal(code) is not None:
            code = -int(bubblewrap.exit_signal(code) or 0)  # bubblewrap exits with 128 + the signal
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = str(-code)
            return f"{self.role} process died with signal {name}"
        return f"{self.role} process exited with code {code}"

    def limit_cgroup(self, memory_bytes: int | None, cpu_cores: int | None = None) -> str:
        """Set its cgroup's memory total, process count and CPU quota; the evidence note."""
        if self.cgroup is None:
            return self.cgroup_note
        try:
            self.cgroup.set_limits(memory_bytes, sandbox.MAX_PROCESSES, cpu_cores)
        except OSError as err:
            return f"{self.cgroup_note}: limits not set ({err.strerror or err})"
        total = f"memory {memory_bytes >> 20} MiB in total, " if memory_bytes else ""
        cpu = f", CPU {cpu_cores} cores" if cpu_cores is not None and self.cgroup.has_cpu else ""
        return f"{self.cgroup_note} per worker: {total}{sandbox.MAX_PROCESSES} processes and threads{cpu}"

    def escaped_processes(self) -> list[int]:
        """Processes in its cgroup that are not in its process group (what stopping the group
        does not stop); [] where it has no cgroup or every process is in the group."""
        if self.cgroup is None:
            return []
        out = []
        for pid in self.cgroup.pids():
            fields = stat_fields(pid)  # None: exited meanwhile
            if fields is not None and len(fields) > 2 and int(fields[2]) != self.proc.pid:  # its pgrp
                out.append(pid)
        return out

    def oom_note(self) -> str:
        """Why it died, when its cgroup's OOM killer ended one of its processes ("" otherwise)."""
        if self.cgroup is None or not self.cgroup.oom_kills():
            return ""
        return "its processes together passed their memory limit (the cgroup's OOM killer ended one)"

    def stderr_tail(self) -> str:
        try:
            with open(self.stderr_path, "rb") as f:
                f.seek(max(0, os.path.getsize(self.stderr_path) - 4000))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def close(self) -> None:
        try:
            framing.send_json(self.conn, {"op": "exit"})
        except (OSError, ValueError):
            pass
        sandbox.kill_group(self.proc, grace_s=0.5)
        if self.cgroup is not None:
            self.cgroup.remove()  # whatever left its process group goes too
        self.conn.close()
        self._stderr.close()
        for arena_fd in self.arena_fds.values():
            os.close(arena_fd)
        self.arena_fds = {}


def _visible(idx: str) -> str:
    """Map our device index through the judge's own CUDA_VISIBLE_DEVICES."""
    parent = os.environ.get("CUDA_VISIBLE_DEVICES")
    if parent:
        ids = parent.split(",")
        return ids[int(idx)] if int(idx) < len(ids) else idx
    return idx


@dataclasses.dataclass
class StartedWorkers:
    """The two workers a judge starts before its request arrives, and their private directory."""

    device: str  # the evaluation device they were started for (ScoreConfig.device)
    tmp: str
    workers: list[WorkerHandle]
    scratch_bytes: int = sandbox.Limits.file_size_bytes

    @property
    def staged_cache(self) -> str:
        """Where the judge puts the extensions the candidate worker may load (read-only to it)."""
        return os.path.join(self.tmp, STAGED_CACHE)

    def fits(self, device: str, scratch_bytes: int) -> bool:
        """Whether these workers can serve an evaluation with these settings (a bubblewrap
        sandbox sizes its tmpfs mounts when it starts)."""
        if device != self.device:
            return False
        if not any(w.bubblewrapped for w in self.workers):
            return True
        return scratch_bytes == self.scratch_bytes

    def close(self) -> None:
        for w in self.workers:
            w.close()
        self.workers = []

    def discard(self) -> None:
        """Close both workers and wipe their private directory: these workers serve nobody."""
        self.close()
        sandbox.wipe(self.tmp)


def start_workers(device: str, report_pgid: Any,
                  scratch_bytes: int = sandbox.Limits.file_size_bytes) -> StartedWorkers:
    """Start the reference and the candidate worker for ``device``; nothing task-specific yet.
    ``scratch_bytes`` (the file-size limit) shapes a bubblewrap sandbox, which cannot change once
    started. The extensions the candidate may load come later, copied by the judge into
    ``StartedWorkers.staged_cache`` (the build pool's cache itself is never in a worker's view)."""
    tmp = sandbox.make_private_tmp("evalfarm-eval-")
    worker_device = device if device != "cuda" else "cuda:0"
    started = StartedWorkers(device, tmp, [], scratch_bytes)
    os.mkdir(started.staged_cache, 0o755)
    cores = cpu_pinning.plan(device)
    try:
        for role in (REFERENCE, CANDIDATE):
            staged = started.staged_cache if role == CANDIDATE else ""
            started.workers.append(WorkerHandle(worker_device, os.path.join(tmp, role), role, staged, scratch_bytes,
                                                cores.worker(role) if cores is not None else None))
            report_pgid(started.workers[-1].proc.pid)
    except BaseException:
        started.close()
        sandbox.wipe(tmp)
        raise
    return started
