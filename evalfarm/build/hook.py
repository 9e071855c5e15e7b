"""Routing a candidate's ``load_inline`` calls through the extension cache.

Installed in the build runner and in the candidate worker before the candidate's module
runs. A cache hit imports the built .so directly (no compiler, no ninja, no lock file);
a miss builds in a private directory and commits it to the cache.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import sys
import time
from pathlib import Path
from typing import Any

from evalfarm.build import includes
from evalfarm.build.cache import ExtensionCache, extension_key, extension_spec, toolchain

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


@dataclasses.dataclass
class HookState:
    cache: ExtensionCache
    arch: str
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


def install(cache: ExtensionCache, arch: str) -> HookState:
    """Replace torch.utils.cpp_extension.load_inline with the cached version."""
    global _state
    import torch.utils.cpp_extension as cpp_ext

    real_load_inline = cpp_ext.load_inline
    accepted = set(inspect.signature(real_load_inline).parameters)
    state = HookState(cache=cache, arch=arch)
    _state = state

    def cached_load_inline(name: str, cpp_sources: Any, cuda_sources: Any = None, **kwargs: Any) -> Any:
        spec = extension_spec(name, cpp_sources, cuda_sources, kwargs)
        with_cuda = bool(spec["cuda_sources"]) or bool(kwargs.get("with_cuda"))
        key = extension_key(spec, toolchain(with_cuda, arch))
        start = time.monotonic()
        hit = cache.lookup(key, name)
        if hit is not None and kwargs.get("is_python_module", True):
            module = _import_so(name, hit)
            state.built.append(BuiltExtension(name, key, True, time.monotonic() - start, str(hit)))
            return module
        refused = includes.refused_include(spec["cpp_sources"] + spec["cuda_sources"], str(cache.tmp_root / "build"))
        if refused:
            state.compile_error = f"building extension {name!r} refused: {refused}"
            raise CompileError(state.compile_error)
        build_dir = cache.new_build_dir(key)
        call_kwargs = {k: v for k, v in kwargs.items() if k in accepted and k != "build_directory"}
        try:
            module = real_load_inline(
                name, cpp_sources, cuda_sources, build_directory=str(build_dir), **call_kwargs
            )
        except Exception as err:
            state.compile_error = truncate(includes.redact(f"building extension {name!r} failed:\n{err}", str(build_dir)))
            raise CompileError(state.compile_error) from None
        seconds = time.monotonic() - start
        entry = cache.commit(key, build_dir, {"spec": spec, "key": key, "seconds": seconds})
        state.built.append(BuiltExtension(name, key, False, seconds, str(entry / f"{name}.so")))
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
