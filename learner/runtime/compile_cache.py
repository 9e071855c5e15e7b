"""JAX's persistent compilation cache for a run (``cfg.jax_cache_dir``).

A learner compiles its train steps, its sampler and its evaluation once per process. A run that
resumes after a crash or a kill, ``learner eval`` on a checkpoint, or the next arm of an experiment
compiles the same programs again: on a CPU host that is most of a small run's start-up. With the
cache on, JAX writes each compiled program of at least ``jax_persistent_cache_min_compile_time_secs``
(one second unless set) to a directory and loads it from there the next time the same program, on
the same devices and JAX version, is asked for.

Settings (``cfg.jax_cache_dir``):

* ``""`` (default): the directory in ``$JAX_COMPILATION_CACHE_DIR`` where the operator set one,
  else ``<workdir>/jax-cache``, private to the run;
* ``"off"``: no persistent cache (as JAX does by default);
* a path: that directory, for example one shared by the runs of one user.

The cache holds code this process will run: like the workdir, it must be writable only by the user
who runs the learner (JAX's own guidance). A process takes the first directory it is given; JAX
does not move an initialised cache.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger(__name__)

CACHE_ENV = "JAX_COMPILATION_CACHE_DIR"
OFF = "off"

_enabled: Path | None = None


def cache_dir_for(setting: str, workdir: str | Path, environ: Mapping[str, str] | None = None) -> Path | None:
    """The directory ``setting`` names for a run in ``workdir`` (None: no cache)."""
    environ = os.environ if environ is None else environ
    setting = str(setting).strip()
    if setting == OFF:
        return None
    if setting:
        return Path(setting).expanduser()
    if environ.get(CACHE_ENV, "").strip():
        return Path(environ[CACHE_ENV].strip()).expanduser()
    return Path(workdir) / "jax-cache"


def enable(setting: str, workdir: str | Path) -> Path | None:
    """Point JAX's persistent compilation cache at the directory ``setting`` names (made if
    missing); returns it, or None when off. Call before the process's first compilation."""
    global _enabled
    path = cache_dir_for(setting, workdir)
    if path is None:
        return None
    if _enabled is not None:
        if path.resolve() != _enabled.resolve():
            log.info("JAX compilation cache stays at %s for this process (asked for %s)", _enabled, path)
        return _enabled
    import jax

    path.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    _enabled = path
    log.info("JAX compilation cache: %s", path)
    return path
