"""Process isolation for code we do not trust: own session, resource limits, a clean environment.

Applied by our own entry points (build runner, candidate worker) before any candidate code
runs. The candidate worker also asks for a private network namespace (best effort: it needs
CAP_SYS_ADMIN) and a process-count limit (not effective for root); ``isolate_process`` says
what was obtained. Filesystem namespaces are not set up here; see docs/security.md for what
each deployment adds on top.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from evalfarm.sandbox import procfs

# Variables a candidate process keeps; everything else (tokens, credentials) is dropped.
# EVALFARM_WORKER_POISON is the operator's switch for the worker's free-memory poisoning
# (evalfarm/judge/poison.py: "1" everywhere, "0" nowhere, unset = CUDA only; recorded in the evidence).
_ENV_KEEP = ("PATH", "LANG", "LC_ALL", "CUDA_HOME", "CUDA_PATH", "CXX", "CC", "LD_LIBRARY_PATH",
             "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "CUDA_DEVICE_ORDER", "EVALFARM_WORKER_POISON",
             "EVALFARM_WORKER_NETNS", "EVALFARM_WORKER_PIDNS", "EVALFARM_SANDBOX_UID", "EVALFARM_SECCOMP")
# The judge keeps these too: which GPU the slot has, and the log level. Nothing else of the
# daemon's environment (its token, credentials, the operator's shell) reaches the judge.
_JUDGE_ENV_KEEP = (*_ENV_KEEP, "CUDA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES_FOR_WORKER", "EVALFARM_LOG_LEVEL",
                   "OMP_NUM_THREADS", "EVALFARM_SANDBOX", "EVALFARM_SANDBOX_SHARED_DIR", "EVALFARM_CGROUP",
                   "EVALFARM_LEASE_DIR", "EVALFARM_PIN_CORES", "EVALFARM_JUDGE_CPROFILE", "EVALFARM_ROUND_TRACE",
                   "EVALFARM_PREPARE_AHEAD", "EVALFARM_GO_FIRST", "EVALFARM_JUDGE_SPIN_US", "EVALFARM_ROUND_WRITE",
                   "EVALFARM_REFERENCE_POISON", "EVALFARM_STANDBY_META_WARMUP", "EVALFARM_PLACE_CALLS",
                   "EVALFARM_WINDOW_EARLY_START", "EVALFARM_ARENA_BUDGET_MB", "EVALFARM_DRAW_AHEAD",
                   "EVALFARM_AUDIT_OVERLAP", "EVALFARM_REFERENCE_MEMO_MB")


@dataclasses.dataclass(frozen=True)
class Limits:
    cpu_seconds: int = 3600
    memory_bytes: int | None = 16 << 30  # address space; None on GPU (CUDA maps huge ranges)
    file_size_bytes: int = 1 << 30
    open_files: int = 4096


def mapped_bytes() -> int:
    """The calling process's address space in use now (``vsize`` of /proc/self/stat, VmSize), or 0
    where /proc cannot say."""
    fields = procfs.stat_fields("self")
    try:
        return int(fields[20]) if fields else 0  # field 23 in ``man 5 proc``
    except (ValueError, IndexError):
        return 0


def address_space_limit(memory_bytes: int) -> tuple[int, str]:
    """RLIMIT_AS for a process that has already imported its libraries: ``memory_bytes`` beyond
    what is mapped now, and a note saying so.

    An address-space limit counts every mapping, and a CUDA build of torch maps several GiB of
    libraries at import whether or not the device is used. A fixed 16 GiB limit then left a CPU
    evaluation on a GPU host too little room for OpenMP to start its threads ("libgomp: Thread
    creation failed: Resource temporarily unavailable") where the same task ran on a CPU-only
    host. Counting from what the trusted start-up mapped gives the task and the
    candidate the same room on every host."""
    base = mapped_bytes()
    return base + memory_bytes, (f"address space limit {(base + memory_bytes) >> 20} MiB: "
                                 f"{memory_bytes >> 20} MiB beyond the {base >> 20} MiB mapped at start-up")


def apply_limits(limits: Limits) -> None:
    """Called inside the child before untrusted code runs."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 5))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_size_bytes, limits.file_size_bytes))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    n = min(limits.open_files, hard) if hard != resource.RLIM_INFINITY else limits.open_files
    resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
    if limits.memory_bytes is not None:
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))


CLONE_NEWNET = 0x40000000
# Processes (and threads: Linux counts both) the candidate's user may own under RLIMIT_NPROC.
# Generous enough for OpenMP pools and compilers, small enough to stop a fork bomb.
MAX_PROCESSES = 4096


def enter_network_namespace() -> str:
    """Move the calling process into a new, empty network namespace (only a loopback, down).

    Call it before any other thread exists: namespaces are per thread, and threads started
    earlier keep the old one. Returns "" on success, else why it was not possible.
    """
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError as err:
        return f"libc not loadable: {err}"
    if libc.unshare(CLONE_NEWNET) == 0:
        return ""
    code = ctypes.get_errno()
    return f"unshare(CLONE_NEWNET) failed: {errno.errorcode.get(code, code)} ({os.strerror(code)})"


def limit_processes(max_processes: int = MAX_PROCESSES) -> str:
    """Cap RLIMIT_NPROC. Returns "" when the cap is in force, else why it is not."""
    if os.geteuid() == 0:
        return "RLIMIT_NPROC not effective: running as root"
    try:
        _, hard = resource.getrlimit(resource.RLIMIT_NPROC)
        n = max_processes if hard == resource.RLIM_INFINITY else min(max_processes, hard)
        resource.setrlimit(resource.RLIMIT_NPROC, (n, n))
    except (OSError, ValueError) as err:
        return f"RLIMIT_NPROC not set: {err}"
    return ""


def isolate_process(network: bool = True) -> list[str]:
    """Best-effort isolation of the calling process; returns what was and was not obtained.

    Entries are "network namespace", "no network namespace: <why>", "process limit N" or
    "no process limit: <why>". Never raises: a refused request is recorded, not fatal.
    """
    notes: list[str] = []
    if network:
        why = enter_network_namespace()
        notes.append("network namespace" if not why else f"no network namespace: {why}")
    why = limit_processes()
    notes.append(f"process limit {MAX_PROCESSES}" if not why else f"no process limit: {why}")
    return notes


def project_root() -> str:
    """The directory holding the evalfarm package (so children can import it)."""
    return str(Path(__file__).resolve().parents[2])


def clean_env(private_tmp: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: os.environ[k] for k in _ENV_KEEP if k in os.environ}
    env.update(
        HOME=private_tmp,
        TMPDIR=private_tmp,
        TORCH_EXTENSIONS_DIR=os.path.join(private_tmp, "torch_extensions"),
        PYTHONPATH=project_root(),
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONNOUSERSITE="1",
        OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", str(os.cpu_count() or 1)),
        # OpenMP threads sleep as soon as a parallel region ends instead of spinning: a worker's
        # spinning threads (a few ms after each of its calls) took the CPU from the other worker's
        # next timed call, which then carried a 3-4 ms pre-call charge on a 2-core host and paid
        # honest kernels 0.05-0.5x (docs/benchmarks.md, "2b"). Both workers alike.
        OMP_WAIT_POLICY="PASSIVE",
        # The same fixed glibc heap settings in every worker: with glibc's dynamic thresholds, two
        # processes running the same call can differ in whether its buffers come from a heap kept
        # mapped or from fresh pages (page faults on every call), depending on what each did before.
        MALLOC_MMAP_THRESHOLD_=str(32 << 20),
        MALLOC_TRIM_THRESHOLD_=str(256 << 20),
    )
    if extra:
        env.update(extra)
    return env


def judge_env(private_tmp: str, extra: dict[str, str] | None = None, bytecode_dir: str = "") -> dict[str, str]:
    """The judge's whole environment: an allow-list of the caller's, a private HOME, our PYTHONPATH.
    ``bytecode_dir``: where the judge keeps compiled bytecode (evalfarm.judge.bytecode); without
    it, the judge writes none."""
    env = {k: os.environ[k] for k in _JUDGE_ENV_KEEP if k in os.environ}
    env.update(HOME=private_tmp, TMPDIR=private_tmp, PYTHONPATH=project_root(), PYTHONNOUSERSITE="1")
    if bytecode_dir:
        env["PYTHONPYCACHEPREFIX"] = bytecode_dir
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    if extra:
        env.update(extra)
    return env


def make_private_tmp(prefix: str) -> str:
    """A fresh directory only its owner can list; others may traverse it (an unprivileged worker
    reaches its own directory below it by path), and its random name is not guessable."""
    path = tempfile.mkdtemp(prefix=prefix)
    os.chmod(path, 0o711)
    return path


def wipe(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def kill_group(proc: subprocess.Popen | None, grace_s: float = 0.0) -> None:
    """SIGKILL the whole process group of a child started with start_new_session=True, then reap it."""
    if proc is None:
        return
    if proc.poll() is None and grace_s > 0:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
        deadline = time.monotonic() + grace_s
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def python_cmd(module: str) -> list[str]:
    return [sys.executable, "-m", module]
