"""Process isolation for code we do not trust: own session, resource limits, a clean environment.

Applied by our own entry points (build runner, candidate worker) before any candidate code
runs. Network and filesystem namespaces are not set up here; see docs/security.md for
what each deployment adds on top.
"""

from __future__ import annotations

import dataclasses
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Variables a candidate process keeps; everything else (tokens, credentials) is dropped.
_ENV_KEEP = ("PATH", "LANG", "LC_ALL", "CUDA_HOME", "CUDA_PATH", "CXX", "CC", "LD_LIBRARY_PATH",
             "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES")


@dataclasses.dataclass(frozen=True)
class Limits:
    cpu_seconds: int = 3600
    memory_bytes: int | None = 16 << 30  # address space; None on GPU (CUDA maps huge ranges)
    file_size_bytes: int = 1 << 30
    open_files: int = 4096


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


def project_root() -> str:
    """The directory holding the evalfarm package (so children can import it)."""
    return str(Path(__file__).resolve().parent.parent)


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
    )
    if extra:
        env.update(extra)
    return env


def make_private_tmp(prefix: str) -> str:
    return tempfile.mkdtemp(prefix=prefix)


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
