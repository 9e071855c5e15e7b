"""A bytecode cache for judge processes, where the host's Python library has none.

Every judge is a fresh interpreter. Where the library it imports carries compiled bytecode
(``__pycache__`` beside each module, as ``pip install`` leaves it), an import reads it; where
it does not (images built with ``pip install --no-compile``, ``PYTHONDONTWRITEBYTECODE`` set
when the library was installed, bytecode stale after the sources were copied), every judge
compiles each module it imports from source, and the judge itself writes none (its
environment sets ``PYTHONDONTWRITEBYTECODE``). On one GPU host that was 3.5 s of ``compile``
per judge (the memory plan's shape-only pass imports about 840 modules: sympy,
``torch._refs``), in every evaluation that starts a judge.

The rule. Where the library lacks bytecode (``library_lacks_bytecode``) and candidates cannot
write into the cache (``candidates_cannot_write``), each judge gets ``PYTHONPYCACHEPREFIX`` set
to one directory owned by the farm's user and only its (mode 0700), and may write bytecode
there: the first judge compiles what it imports, later ones read it. Python checks each cached
file against its source (modification time and size, as for ``__pycache__``), so an upgraded
library is compiled afresh. What a judge imports through the import system is the library and
the ``evalfarm`` package only: a task's module is executed from its source
(evalfarm.tasks.format), never imported, and no candidate code runs in a judge. The judge's
workers read the cache too, never writing (evalfarm.judge.worker_processes: a read-only bind in
bubblewrap, ``PYTHONDONTWRITEBYTECODE`` set), so a fresh worker does not compile torch either.

Why a candidate cannot use it: bytecode in the cache runs in the judge, so the cache is used
only where no candidate process can write there: workers and builds inside bubblewrap (whose
mount namespace holds only read-only binds of the interpreter, the package and the toolchains:
the cache is not among them), or, as root, under another uid (uid 65534), for which the
directory is closed. With the daemon's own uid and no mount namespace (``--allow-weak-sandbox``
without root) a candidate could write the cache, so judges compile from source as before.

``EVALFARM_JUDGE_BYTECODE`` (read by the judge's owner): ``auto`` (the default, the rule above),
``off`` (never), or ``on`` (wherever candidates cannot write it, even where the library has
bytecode: every judge then reads the cache rather than the library's, which the first judge of a
cache fills). ``EVALFARM_CACHE_DIR`` moves it with the other caches (``<dir>/judge-bytecode``).
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
import stat
import struct
import sys
from pathlib import Path

from evalfarm.build.cache import DEFAULT_CACHE_DIR

log = logging.getLogger(__name__)

SWITCH_ENV = "EVALFARM_JUDGE_BYTECODE"
SETTINGS = ("auto", "on", "off")
# Modules whose bytecode says whether the library has any: imported by every judge (torch) or by
# its memory plan's shape-only pass (sympy, through torch's meta kernels).
PROBE_MODULES = ("torch", "torch._refs", "sympy")


class SettingError(ValueError):
    """EVALFARM_JUDGE_BYTECODE holds something other than auto, on or off."""


def setting() -> str:
    value = os.environ.get(SWITCH_ENV, "auto").strip().lower() or "auto"
    if value not in SETTINGS:
        raise SettingError(f"{SWITCH_ENV}={os.environ.get(SWITCH_ENV)!r}: expected one of {', '.join(SETTINGS)}")
    return value


def cache_dir() -> Path:
    return DEFAULT_CACHE_DIR / "judge-bytecode"


def has_current_bytecode(source: str) -> bool:
    """Whether ``source`` has bytecode in its ``__pycache__`` that an import would use: this
    interpreter's magic number, and for a timestamp-based file the source's modification time
    and size (hash-based files count as current)."""
    try:
        with open(_plain_cache_path(source), "rb") as f:
            header = f.read(16)
        st = os.stat(source)
    except (OSError, NotImplementedError, ValueError):
        return False
    if len(header) < 16 or header[:4] != importlib.util.MAGIC_NUMBER:
        return False
    flags, mtime, size = struct.unpack("<III", header[4:16])
    if flags & 0b1:
        return True
    return mtime == (int(st.st_mtime) & 0xFFFFFFFF) and size == (st.st_size & 0xFFFFFFFF)


def _plain_cache_path(source: str) -> str:
    """The ``__pycache__`` path of ``source`` (``importlib.util.cache_from_source`` without a
    pycache prefix), whatever this process's own prefix, and without touching it."""
    head, name = os.path.split(source)
    opt = f".opt-{sys.flags.optimize}" if sys.flags.optimize else ""
    return os.path.join(head, "__pycache__", f"{name.rpartition('.')[0]}.{sys.implementation.cache_tag}{opt}.pyc")


def library_lacks_bytecode(modules: tuple[str, ...] = PROBE_MODULES) -> bool:
    """Whether any of ``modules`` that this interpreter can find has no current bytecode beside
    its source (found, not imported: importing torch here would cost what it measures)."""
    for name in modules:
        source = _source_of(name)
        if source is not None and not has_current_bytecode(source):
            return True
    return False


def _source_of(name: str) -> str | None:
    """The source file of module ``name`` (dotted), found on disk without importing anything
    (``find_spec`` of a submodule would import its package); None where there is none."""
    top, *rest = name.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if not rest:
        return spec.origin if isinstance(spec.origin, str) and spec.origin.endswith(".py") else None
    for base in spec.submodule_search_locations or ():
        path = Path(base, *rest)
        for candidate in (path / "__init__.py", path.with_suffix(".py")):
            if candidate.is_file():
                return str(candidate)
    return None


def candidates_cannot_write(device: str) -> tuple[bool, str]:
    """(whether no candidate process, worker or build, can write a directory of this user's
    with mode 0700, why not when they can)."""
    from evalfarm.sandbox import confine, isolation

    found = isolation.assess(device)
    if found.build == "bubblewrap" and found.worker == "bubblewrap":
        return True, ""  # a mount namespace of read-only binds, the cache not among them
    try:
        target = confine.target_identity()  # None unless the daemon is root and candidates change uid
    except ValueError:
        target = None
    if target is not None and target[0] != 0:
        return True, ""  # another uid, for which the directory is closed
    return False, "candidates run with the daemon's uid and no mount namespace"


@functools.lru_cache(maxsize=8)
def _decide(device: str, chosen: str, directory: str) -> str:
    """The directory judges of ``device`` use, or "" (logged once per choice)."""
    if chosen == "off":
        return ""
    safe, why = candidates_cannot_write(device)
    if not safe:
        log.info("judges compile from source: no bytecode cache (%s)", why)
        return ""
    if chosen == "auto" and not library_lacks_bytecode():
        return ""
    path = Path(directory)
    try:
        path.mkdir(parents=True, exist_ok=True)
        st = path.stat()
        if st.st_uid != os.geteuid():
            log.warning("judge bytecode cache %s is not this user's: not used", path)
            return ""
        if stat.S_IMODE(st.st_mode) != 0o700:
            os.chmod(path, 0o700)
    except OSError as err:
        log.warning("judge bytecode cache %s not usable: %s", path, err)
        return ""
    log.info("judges keep their bytecode in %s", path)
    return str(path)


def judge_cache(device: str) -> str:
    """The bytecode directory for a judge of ``device`` (its ``PYTHONPYCACHEPREFIX``), or "" for
    none. Raises SettingError for a bad EVALFARM_JUDGE_BYTECODE."""
    return _decide(device, setting(), str(cache_dir()))
