"""A content-addressed cache of built inline extensions.

The key covers everything that changes the binary: the load_inline arguments (sources,
functions, flags), the torch and CUDA versions, the Python ABI, the compiler and the
target arch. A build happens in a private temporary directory that is renamed into
place only when it succeeded, so a killed build never leaves a lock or a half-built
entry that a later build would wait on or load.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

DEFAULT_CACHE_DIR = Path(os.environ.get("EVALFARM_CACHE_DIR", Path.home() / ".cache" / "evalfarm"))
STALE_TMP_SECONDS = 6 * 3600


@functools.cache
def _tool_version(cmd: tuple[str, ...]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
        lines = (out.stdout or out.stderr).strip().splitlines()
        return lines[-1] if cmd[0].endswith("nvcc") and lines else (lines[0] if lines else "")
    except (OSError, subprocess.TimeoutExpired):
        return ""


def toolchain(with_cuda: bool, arch: str) -> dict[str, str]:
    import torch

    info = {
        "torch": torch.__version__,
        "torch_cuda": str(torch.version.cuda),
        "python": f"{sys.implementation.name}-{sys.version_info.major}.{sys.version_info.minor}",
        "cxx": _tool_version((os.environ.get("CXX", "c++"), "--version")),
        "arch": arch,
    }
    if with_cuda:
        cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
        nvcc = os.path.join(cuda_home, "bin", "nvcc")
        info["nvcc"] = _tool_version((nvcc if os.path.exists(nvcc) else "nvcc", "--version"))
    return info


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def extension_spec(name: str, cpp_sources: Any, cuda_sources: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The canonical description of one load_inline call."""
    functions = kwargs.get("functions")
    if isinstance(functions, dict):
        functions = sorted(functions.items())
    elif functions is not None:
        functions = _as_list(functions)
    return {
        "name": name,
        "cpp_sources": _as_list(cpp_sources),
        "cuda_sources": _as_list(cuda_sources),
        "functions": functions,
        "extra_cflags": _as_list(kwargs.get("extra_cflags")),
        "extra_cuda_cflags": _as_list(kwargs.get("extra_cuda_cflags")),
        "extra_ldflags": _as_list(kwargs.get("extra_ldflags")),
        "extra_include_paths": _as_list(kwargs.get("extra_include_paths")),
        "with_cuda": kwargs.get("with_cuda"),
        "is_python_module": kwargs.get("is_python_module", True),
        "with_pytorch_error_handling": kwargs.get("with_pytorch_error_handling", True),
    }


def extension_key(spec: dict[str, Any], tools: dict[str, str]) -> str:
    blob = json.dumps({"spec": spec, "tools": tools}, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()


class ExtensionCache:
    """``<root>/ext/<key[:2]>/<key>/`` holds a finished build: the .so, sources and meta.json."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root is not None else DEFAULT_CACHE_DIR
        self.ext_root = self.root / "ext"
        self.tmp_root = self.root / "tmp"
        self.ext_root.mkdir(parents=True, exist_ok=True)
        self.tmp_root.mkdir(parents=True, exist_ok=True)
        for d in (self.root, self.ext_root, self.tmp_root):  # readable, not writable, by a worker's own uid
            try:
                if d.stat().st_uid == os.geteuid() and d.stat().st_mode & 0o777 != 0o755:
                    os.chmod(d, 0o755)
            except OSError:
                pass

    def entry_dir(self, key: str) -> Path:
        return self.ext_root / key[:2] / key

    def lookup(self, key: str, name: str) -> Path | None:
        d = self.entry_dir(key)
        so = d / f"{name}.so"
        return so if (d / "meta.json").is_file() and so.is_file() else None

    def new_build_dir(self, key: str) -> Path:
        d = self.tmp_root / f"{key[:16]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        d.mkdir(parents=True)
        return d

    def commit(self, key: str, build_dir: Path, meta: dict[str, Any]) -> Path:
        """Move a finished build into place (atomic rename); a concurrent twin wins harmlessly."""
        (build_dir / "meta.json").write_text(json.dumps(meta, indent=1))
        for junk in ("lock", ".ninja_lock"):
            (build_dir / junk).unlink(missing_ok=True)
        target = self.entry_dir(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(build_dir, target)
        except OSError:
            if not (target / "meta.json").is_file():
                raise
            shutil.rmtree(build_dir, ignore_errors=True)
        return target

    def sweep_stale(self, max_age_s: float = STALE_TMP_SECONDS) -> int:
        """Remove temporary build dirs left by killed builds."""
        removed = 0
        now = time.time()
        for d in self.tmp_root.iterdir():
            try:
                if now - d.stat().st_mtime > max_age_s:
                    shutil.rmtree(d, ignore_errors=True)
                    removed += 1
            except FileNotFoundError:
                continue
        return removed
