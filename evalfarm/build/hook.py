"""Routing a candidate's ``load_inline`` calls through the extension cache.

Installed in the build runner and in the candidate worker before the candidate's module
runs; both run candidate code, so neither writes the cache. A hit is an entry that verifies
against the hashes recorded when the trusted side installed it: its .so is copied into this
process's private directory, the copy checked against the recorded hash, and the copy imported
(no compiler, no ninja, no lock file, and nothing another process changes after the check is
loaded). A miss, or an entry that does not verify, builds in the private directory
(``<private_root>/<key>/``); the build pool (trusted) installs what the build runner built there
(``evalfarm.build.pool``), and the worker uses its own build for itself only.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from evalfarm.build import includes
from evalfarm.build.cache import (
    CacheTampered,
    ExtensionCache,
    extension_key,
    extension_spec,
    hash_file,
    toolchain,
)

MAX_LOG_CHARS = 16_000


class CompileError(RuntimeError):
    """The candidate's extension did not compile; the message holds the compiler output."""


@dataclasses.dataclass
class BuiltExtension:
    name: str
    key: str
    cache_hit: bool
    seconds: float
    so_path: str
    build_dir: str = ""  # the private build (a miss): what the trusted side may install
    spec: dict[str, Any] = dataclasses.field(default_factory=dict)
    note: str = ""  # e.g. why a cache entry was not used


@dataclasses.dataclass
class HookState:
    cache: ExtensionCache
    arch: str
    private_root: Path
    built: list[BuiltExtension] = dataclasses.field(default_factory=list)
    compile_error: str = ""


_state: HookState | None = None


def truncate(text: str, limit: int = MAX_LOG_CHARS) -> str:
    if len(text) <= limit:
        return text
    head = limit // 4
    return text[:head] + f"\n... [{len(text) - limit} characters cut] ...\n" + text[-(limit - head):]


def _import_so(name: str, so_path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, so_path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import extension {name} from {so_path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module


def _verified_copy(cache: ExtensionCache, key: str, name: str, private_root: Path,
                   expected: dict[str, str] | None = None) -> tuple[Path | None, str]:
    """(a private copy of the entry's .so that matches its recorded hash, or None; why not)."""
    try:
        meta = cache.verify(key)
    except FileNotFoundError:
        return None, ""
    except CacheTampered as err:
        return None, f"{err}: not used, rebuilt"
    if expected is not None and meta["files"] != expected:
        return None, f"cache entry {key[:12]}: differs from what the build pool installed: not used, rebuilt"
    so = cache.entry_dir(key) / f"{name}.so"
    want = meta["files"].get(f"{name}.so")
    if want is None:
        return None, ""
    dest_dir = private_root / "hits" / key
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / f"{name}.so"
    shutil.copyfile(so, dest)
    if hash_file(dest) != want:
        return None, f"cache entry {key[:12]}: {name}.so changed after it was verified: not used, rebuilt"
    return dest, ""


class _NotBuilt:
    """What ``load_inline`` returns while discovering: the extension is not built in this process."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        raise RuntimeError(f"extension {self._name!r} is not built while its specification is discovered")


def install(cache: ExtensionCache, arch: str, private_root: str | Path | None = None, discover: bool = False,
            expected: dict[str, dict[str, str]] | None = None) -> HookState:
    """Replace torch.utils.cpp_extension.load_inline with the cached version. Builds go under
    ``private_root`` (default: ``$TMPDIR/evalfarm-ext``, the process's private directory). With
    ``discover``, a call with no verified entry is recorded and not built. ``expected`` maps keys to
    the file hashes the trusted side installed (the worker gets them from the judge): an entry
    whose recorded hashes differ from these is not used."""
    global _state
    import torch.utils.cpp_extension as cpp_ext

    real_load_inline = cpp_ext.load_inline
    accepted = set(inspect.signature(real_load_inline).parameters)
    root = Path(private_root) if private_root is not None else Path(tempfile.gettempdir()) / "evalfarm-ext"
    state = HookState(cache=cache, arch=arch, private_root=root)
    _state = state

    def cached_load_inline(name: str, cpp_sources: Any, cuda_sources: Any = None, **kwargs: Any) -> Any:
        spec = extension_spec(name, cpp_sources, cuda_sources, kwargs)
        with_cuda = bool(spec["cuda_sources"]) or bool(kwargs.get("with_cuda"))
        key = extension_key(spec, toolchain(with_cuda, arch))
        start = time.monotonic()
        note = ""
        if kwargs.get("is_python_module", True):
            hit, note = _verified_copy(cache, key, name, root, (expected or {}).get(key))
            if hit is not None:
                module = _import_so(name, hit)
                state.built.append(BuiltExtension(name, key, True, time.monotonic() - start, str(hit), spec=spec))
                return module
        refused = includes.refused_include(spec["cpp_sources"] + spec["cuda_sources"], str(root / key))
        if refused:
            state.compile_error = f"building extension {name!r} refused: {refused}"
            raise CompileError(state.compile_error)
        if discover:
            state.built.append(BuiltExtension(name, key, False, 0.0, "", spec=spec, note=note))
            return _NotBuilt(name)
        build_dir = root / key
        shutil.rmtree(build_dir, ignore_errors=True)
        build_dir.mkdir(parents=True)
        call_kwargs = {k: v for k, v in kwargs.items() if k in accepted and k != "build_directory"}
        try:
            module = real_load_inline(
                name, cpp_sources, cuda_sources, build_directory=str(build_dir), **call_kwargs
            )
        except Exception as err:
            state.compile_error = truncate(includes.redact(f"building extension {name!r} failed:\n{err}", str(build_dir)))
            raise CompileError(state.compile_error) from None
        seconds = time.monotonic() - start
        for junk in ("lock", ".ninja_lock"):
            (build_dir / junk).unlink(missing_ok=True)
        state.built.append(BuiltExtension(name, key, False, seconds, str(build_dir / f"{name}.so"),
                                          build_dir=str(build_dir), spec=spec, note=note))
        return module

    cpp_ext.load_inline = cached_load_inline
    return state


def uses_inline_extensions(source: str) -> bool:
    """Whether a candidate may call load_inline (decides if it needs the build pool at all)."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in ("load_inline", "cpp_extension"):
            return True
        if isinstance(node, ast.Attribute) and node.attr in ("load_inline", "cpp_extension"):
            return True
        if isinstance(node, ast.alias) and node.name.split(".")[-1] in ("load_inline", "cpp_extension"):
            return True
    return False
