"""Shared test fixtures. GPU tests are marked ``gpu`` and skipped where no NVIDIA GPU is visible."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).parent / "data"

# JAX on the CPU compiles the tests' many small programs with LLVM's optimisation off: compiling,
# not running, is what those tests spend (the learner's tests: 2:22 -> 1:42 on 2 cores, the same
# results). Set before JAX starts its backend; processes the tests start inherit it unless they
# set XLA_FLAGS themselves. A caller's own setting of the flag wins.
_FAST_COMPILE = "--xla_backend_optimization_level=0"
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = " ".join(filter(None, [os.environ.get("XLA_FLAGS", ""), _FAST_COMPILE]))


def _has_gpu() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


HAS_GPU = _has_gpu()


def pytest_report_header(config: pytest.Config) -> str:
    from tests.sandbox_under_test import describe

    return describe()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    from tests.sandbox_under_test import SANDBOX, describe

    if not SANDBOX.strong:  # said again at the end, where a green run is read
        terminalreporter.write_sep("!", describe(), yellow=True, bold=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


def _xdist_run() -> str:
    """The id shared by every worker of one ``pytest -n N`` run ("" without xdist)."""
    return os.environ.get("PYTEST_XDIST_TESTRUNUID", "")


def _run_dir(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A directory of this test run's, the same for all its xdist workers (one of the session's
    own without xdist)."""
    if not _xdist_run():
        return tmp_path_factory.mktemp(name)
    path = tmp_path_factory.getbasetemp().parent / f"{name}-shared"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture(scope="session")
def build_pool(tmp_path_factory: pytest.TempPathFactory):
    """One build pool per session over one extension cache per run (shared by the xdist workers,
    as daemons share one), so each extension compiles once."""
    from evalfarm.build import BuildPool

    pool = BuildPool(max_workers=1, cache_dir=_run_dir(tmp_path_factory, "ext-cache"))
    yield pool
    pool.close()


@pytest.fixture(scope="session", autouse=True)
def _jax_compilation_cache(tmp_path_factory: pytest.TempPathFactory):
    """One JAX compilation cache per test run (learner.runtime.compile_cache), shared by the xdist workers
    and by every learner process the tests start (they inherit the environment): a program the
    tests compile in several processes compiles once. Every compilation is kept, however short
    (the tests compile many small programs). A cache the caller set is used as it is."""
    from learner.runtime.compile_cache import CACHE_ENV

    if os.environ.get(CACHE_ENV):
        yield
        return
    path = _run_dir(tmp_path_factory, "jax-cache")
    os.environ[CACHE_ENV] = str(path)
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    if "jax" in sys.modules:  # imported while collecting: set it before the first compilation
        jax = sys.modules["jax"]
        jax.config.update("jax_compilation_cache_dir", str(path))
        jax.config.update("jax_persistent_cache_min_compile_time_secs",
                          float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]))
    yield


@pytest.fixture(autouse=True)
def _exclusive_when_marked(request: pytest.FixtureRequest):
    """Under xdist, a test marked ``exclusive`` runs while no other test of the run does (it
    checks host-wide state, such as the run directories in the temp root); every other test
    holds a shared lock. A gate lock keeps new shared holders out while an exclusive test waits."""
    run = _xdist_run()
    if not run:
        yield
        return
    base = os.path.join(tempfile.gettempdir(), f"evalfarm-tests-{run}")
    os.makedirs(base, exist_ok=True)
    exclusive = request.node.get_closest_marker("exclusive") is not None
    with open(os.path.join(base, "gate"), "a") as gate, open(os.path.join(base, "tests"), "a") as tests:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(tests, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(tests, fcntl.LOCK_UN)


@pytest.fixture
def tmp_path(tmp_path: Path) -> Path:
    """pytest's ``tmp_path``, reachable by the farm's workers. Run as root, a worker drops to an
    unprivileged uid (evalfarm.sandbox.confine) and could not write files that a test's candidate uses
    to report what it saw (pytest makes its directories 0700): the test directory is opened to
    every user, and its parents up to the temp root made traversable (pytest-of-<user>, pytest-N,
    and under xdist popen-gwN: a worker masks a directory it cannot traverse, evalfarm.sandbox.confine)."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        temp_root = Path(tempfile.gettempdir()).resolve()
        for parent in tmp_path.resolve().parents:
            if parent == temp_root or temp_root not in parent.parents:
                break
            parent.chmod(parent.stat().st_mode | 0o711)
        tmp_path.chmod(0o777)
    return tmp_path
