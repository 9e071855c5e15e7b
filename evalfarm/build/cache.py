"""A content-addressed cache of built inline extensions.

The key covers everything that changes the binary: the load_inline arguments (sources,
functions, flags), the torch and CUDA versions, the Python ABI, the compiler and the
target arch.

The cache is written only by trusted code (the build pool, in the daemon's or caller's process).
Candidate code, in the build runner or the worker, builds in a private directory of its own and
never writes here. The trusted side copies a finished build into a fresh staging directory,
hashes every file, records the hashes in ``meta.json``, makes the files and directories
read-only, and renames the staging directory into place under the content key: one atomic step,
write-once (an entry that verifies is never replaced). ``lookup`` verifies an entry's hashes
before handing it out; an entry that does not verify (tampered with) is not used: the build is
redone in private, reinstalled by the trusted side, and the evidence says so.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import stat
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
        # Only when set, so that the keys of every other call stay what they were.
        **({"no_implicit_headers": True} if kwargs.get("no_implicit_headers") else {}),
    }


def extension_key(spec: dict[str, Any], tools: dict[str, str]) -> str:
    blob = json.dumps({"spec": spec, "tools": tools}, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()


class CacheTampered(RuntimeError):
    """A cache entry whose files do not match the hashes recorded when it was installed."""


BUILD_JUNK = ("lock", ".ninja_lock", "meta.json")


def hash_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def tree_hashes(root: Path) -> dict[str, str]:
    """``{relative path: sha256}`` of every regular file under ``root`` (meta.json excluded).
    Anything else (a symlink, a device, a fifo) is refused: a build holds plain files only."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            mode = path.lstat().st_mode
            if stat.S_ISDIR(mode):
                continue
            if not stat.S_ISREG(mode):
                raise CacheTampered(f"{path} is not a plain file")
            rel = str(path.relative_to(root))
            if rel != "meta.json":
                out[rel] = hash_file(path)
    return out


def remove_tree(path: Path) -> None:
    """Remove a directory tree, read-only entries included."""
    def writable(func: Any, p: str, _exc: Any) -> None:
        try:
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
            func(p)
        except OSError:
            pass

    if path.exists():
        shutil.rmtree(path, onerror=writable)


def move_dir(src: Path, dst: Path) -> None:
    """Rename a read-only directory into another parent directory. Without root this needs write
    permission on the directory itself (its ``..`` entry changes), so the owner gets it for the
    move and the directory is read-only again afterwards."""
    mode = src.stat().st_mode & 0o777
    if not os.access(src, os.W_OK):
        os.chmod(src, mode | 0o200)
    try:
        os.rename(src, dst)
    except OSError:
        if os.path.isdir(src):
            os.chmod(src, mode)
        raise
    os.chmod(dst, mode)


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
        """The entry's ``<name>.so`` if the entry exists and verifies; None otherwise (a tampered
        entry included: ``verify`` says which)."""
        so = self.entry_dir(key) / f"{name}.so"
        if not so.is_file():
            return None
        try:
            self.verify(key)
        except CacheTampered:
            return None
        return so

    def verify(self, key: str) -> dict[str, Any]:
        """The entry's meta.json when every file matches the hashes recorded at install; raises
        CacheTampered otherwise (FileNotFoundError when there is no entry)."""
        d = self.entry_dir(key)
        try:
            meta = json.loads((d / "meta.json").read_text())
        except FileNotFoundError:
            raise
        except (OSError, ValueError) as err:
            raise CacheTampered(f"cache entry {key[:12]}: unreadable meta.json ({err})") from None
        if not isinstance(meta, dict) or meta.get("key") != key or not isinstance(meta.get("files"), dict):
            raise CacheTampered(f"cache entry {key[:12]}: meta.json does not describe this key")
        if tree_hashes(d) != meta["files"]:
            raise CacheTampered(f"cache entry {key[:12]}: its files do not match the hashes recorded at install")
        return meta

    def install(self, key: str, build_dir: Path, meta: dict[str, Any]) -> tuple[Path, str]:
        """Trusted side: install a finished private build under ``key``; (entry, note).

        The build's plain files are copied (never moved: whoever built them may still hold them)
        into a fresh staging directory, hashed, made read-only, and renamed into place. An entry
        already there that verifies is kept (write-once); one that does not is removed first, and
        the note says so."""
        stage = self.tmp_root / f"{key[:16]}-install-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            shutil.copytree(build_dir, stage, symlinks=True,
                            ignore=lambda _d, names: [n for n in names if n in BUILD_JUNK])
            files = tree_hashes(stage)  # refuses symlinks and special files from the build
            (stage / "meta.json").write_text(json.dumps({**meta, "key": key, "files": files}, indent=1))
            for dirpath, _dirs, filenames in os.walk(stage, topdown=False):
                for name in filenames:
                    os.chmod(os.path.join(dirpath, name), 0o444)
                os.chmod(dirpath, 0o555)
            target = self.entry_dir(key)
            target.parent.mkdir(parents=True, exist_ok=True)
            note = ""
            if target.exists():
                try:
                    self.verify(key)
                    return target, ""  # write-once: a concurrent twin won
                except (CacheTampered, FileNotFoundError) as err:
                    note = f"{err}; replaced by a fresh build"
                    aside = self.tmp_root / f"{key[:16]}-tampered-{uuid.uuid4().hex[:8]}"
                    move_dir(target, aside)
                    remove_tree(aside)
            try:
                move_dir(stage, target)
            except OSError:
                self.verify(key)  # a concurrent install got there first; it must verify
            return target, note
        finally:
            remove_tree(stage)

    def stage(self, expected: dict[str, dict[str, str]], dest: str | Path) -> ExtensionCache:
        """Trusted side: copy the entries a worker may load (``expected``: key -> the file hashes the
        build pool installed) into ``dest``, laid out as a cache of their own, read-only, so that the
        worker's sandbox shows these and nothing else of the cache. An entry that does not verify
        against its expected hashes is left out (the worker then builds it for itself)."""
        staged = ExtensionCache(dest)
        for key, files in expected.items():
            try:
                if self.verify(key)["files"] != files:
                    continue
            except (FileNotFoundError, CacheTampered):
                continue
            target = staged.entry_dir(key)
            if target.exists():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(self.entry_dir(key), target, symlinks=True)
            for dirpath, _dirs, filenames in os.walk(target, topdown=False):
                for name in filenames:
                    os.chmod(os.path.join(dirpath, name), 0o444)
                os.chmod(dirpath, 0o555)
        return staged

    def evict(self, key: str) -> None:
        """Remove an entry (one that failed verification) so the next build reinstalls it."""
        target = self.entry_dir(key)
        if target.exists():
            aside = self.tmp_root / f"{key[:16]}-evicted-{uuid.uuid4().hex[:8]}"
            try:
                move_dir(target, aside)
            except OSError:
                return
            remove_tree(aside)

    def sweep_stale(self, max_age_s: float = STALE_TMP_SECONDS) -> int:
        """Remove temporary build dirs left by killed builds."""
        removed = 0
        now = time.time()
        for d in self.tmp_root.iterdir():
            try:
                if now - d.stat().st_mtime > max_age_s:
                    remove_tree(d)
                    removed += 1
            except FileNotFoundError:
                continue
        return removed
