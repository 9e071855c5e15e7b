"""Routing a candidate's ``load_inline`` calls through the extension cache.

Installed in the build runner and in the candidate worker before the candidate's module
runs; both run candidate code, so neither writes the cache. A hit is an entry that verifies
against the hashes recorded when the trusted side installed it: its .so is copied into this
process's private directory, the copy checked against the recorded hash, and the copy imported
(no compiler, no ninja, no lock file, and nothing another process changes after the check is
loaded). A miss, or an entry that does not verify, builds in the private directory
(``<private_root>/<key>/``); the build pool (trusted) installs what the build runner built there
(``evalfarm.build.pool``), and the worker uses its own build for itself only.

A build that failed is raised as ``load_inline`` would raise it: the exception type torch raised
(``RuntimeError("Error building extension 'NAME': <compiler output>")`` for a compiler failure),
with the compiler's output redacted (``evalfarm.build.includes.redact``). For a key the trusted
pool already failed to build (``failed``, handed down by the judge), the recorded failure is
raised and nothing is compiled here. The candidate may catch it and go on, as it would under plain
Python; ``HookState.raised_by`` tells whether an error that escaped the candidate is one of these
(an uncaught build failure: COMPILE_ERROR). A refused source (an ``#include`` outside the
toolchain, ``evalfarm.build.includes``) is not a compiler failure and is not the candidate's to
catch: ``on_refused`` ends the evaluation on the spot where one is given (the worker).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

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

# The exception types a failed build is raised as: what ``load_inline`` itself raises (RuntimeError
# from the compiler or ninja, ImportError when the built library does not load, OSError, ValueError
# or TypeError from its arguments). Any other type name a build reports is raised as RuntimeError.
BUILD_ERROR_TYPES: dict[str, type[Exception]] = {
    c.__name__: c for c in (RuntimeError, ImportError, ModuleNotFoundError, OSError, ValueError, TypeError)}


class CompileError(RuntimeError):
    """A refused build (an ``#include`` outside the build directory and the toolchain). The worker
    ends the evaluation instead (``on_refused``); it is raised where no verdict can be given on the
    spot (the build runner's discover step, whose report the pool checks itself)."""


def error_type(name: Any) -> str:
    """``name`` if it is one of BUILD_ERROR_TYPES, else "RuntimeError"."""
    return name if isinstance(name, str) and name in BUILD_ERROR_TYPES else "RuntimeError"


def build_error(failure: dict[str, Any]) -> Exception:
    """A fresh exception for a recorded build failure (``{"type", "message"}``), as load_inline
    would raise it; built outside any ``except`` block, so it carries no other exception."""
    return BUILD_ERROR_TYPES[error_type(failure.get("type"))](str(failure.get("message") or ""))


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
class RaisedFailure:
    """A build failure raised to the candidate: the exception object itself (to recognise it, or
    an error it caused, if it escapes) and the compiler's log (the verdict's detail if it does)."""

    name: str
    key: str
    log: str
    exception: BaseException
    recorded: bool  # the trusted pool's failure (True), or a build of this process's own (False)


@dataclasses.dataclass
class HookState:
    cache: ExtensionCache
    arch: str
    private_root: Path
    built: list[BuiltExtension] = dataclasses.field(default_factory=list)
    failures: list[RaisedFailure] = dataclasses.field(default_factory=list)
    refused: str = ""  # why a source was refused (the last one)

    def raised_by(self, err: BaseException | None) -> RaisedFailure | None:
        """The build failure raised here that ``err`` is, or was raised while handling or from
        (its ``__cause__``/``__context__`` chain); None when it has nothing to do with one."""
        todo, seen = [err], set()
        while todo:
            e = todo.pop()
            if e is None or id(e) in seen:
                continue
            seen.add(id(e))
            for failure in self.failures:
                if failure.exception is e:
                    return failure
            todo += [e.__cause__, e.__context__]
        return None


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
            expected: dict[str, dict[str, str]] | None = None, failed: dict[str, dict[str, Any]] | None = None,
            on_refused: Callable[[str], None] | None = None) -> HookState:
    """Replace torch.utils.cpp_extension.load_inline with the cached version. Builds go under
    ``private_root`` (default: ``$TMPDIR/evalfarm-ext``, the process's private directory). With
    ``discover``, a call with no verified entry is recorded and not built. ``expected`` maps keys to
    the file hashes the trusted side installed (the worker gets them from the judge): an entry
    whose recorded hashes differ from these is not used. ``failed`` maps keys to the failures the
    trusted side recorded (``{"name", "type", "message", "log"}``): such a call raises the failure
    and builds nothing. ``on_refused(why)`` is called for a refused source before anything else
    happens (the worker's ends the evaluation); without it, CompileError is raised."""
    global _state
    import torch.utils.cpp_extension as cpp_ext

    real_load_inline = cpp_ext.load_inline
    accepted = set(inspect.signature(real_load_inline).parameters)
    root = Path(private_root) if private_root is not None else Path(tempfile.gettempdir()) / "evalfarm-ext"
    state = HookState(cache=cache, arch=arch, private_root=root)
    _state = state
    failed = dict(failed or {})

    def raise_failure(name: str, key: str, failure: dict[str, Any], recorded: bool) -> NoReturn:
        exc = build_error(failure)
        state.failures.append(RaisedFailure(name, key, str(failure.get("log") or failure.get("message") or ""),
                                            exc, recorded))
        raise exc

    def cached_load_inline(name: str, cpp_sources: Any, cuda_sources: Any = None, **kwargs: Any) -> Any:
        spec = extension_spec(name, cpp_sources, cuda_sources, kwargs)
        with_cuda = bool(spec["cuda_sources"]) or bool(kwargs.get("with_cuda"))
        key = extension_key(spec, toolchain(with_cuda, arch))
        start = time.monotonic()
        note = ""
        refused = includes.refused_include(spec["cpp_sources"] + spec["cuda_sources"], str(root / key))
        if refused:
            state.refused = f"building extension {name!r} refused: {refused}"
            if on_refused is not None:
                on_refused(state.refused)  # does not return in the worker
            if discover:  # reported: the pool refuses it itself, whatever the module does next
                state.built.append(BuiltExtension(name, key, False, 0.0, "", spec=spec))
            raise CompileError(state.refused)
        if key in failed:  # the trusted pool built it and it failed: raised, never built again here
            raise_failure(name, key, failed[key], recorded=True)
        if kwargs.get("is_python_module", True):
            hit, note = _verified_copy(cache, key, name, root, (expected or {}).get(key))
            if hit is not None:
                module = _import_so(name, hit)
                state.built.append(BuiltExtension(name, key, True, time.monotonic() - start, str(hit), spec=spec))
                return module
        if discover:
            state.built.append(BuiltExtension(name, key, False, 0.0, "", spec=spec, note=note))
            return _NotBuilt(name)
        build_dir = root / key
        shutil.rmtree(build_dir, ignore_errors=True)
        build_dir.mkdir(parents=True)
        call_kwargs = {k: v for k, v in kwargs.items() if k in accepted and k != "build_directory"}
        failure: dict[str, Any] | None = None
        try:
            module = real_load_inline(
                name, cpp_sources, cuda_sources, build_directory=str(build_dir), **call_kwargs
            )
        except Exception as err:  # noqa: BLE001 - raised again below as load_inline would, redacted
            failure = {"type": type(err).__name__,
                       "message": truncate(includes.redact(str(err), str(build_dir))),
                       "log": truncate(includes.redact(f"building extension {name!r} failed:\n{err}", str(build_dir)))}
            del err
        if failure is not None:  # outside the except block: the raw error (unredacted) is not its context
            raise_failure(name, key, failure, recorded=False)
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
