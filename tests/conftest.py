"""Shared test fixtures. GPU tests are marked ``gpu`` and skipped where no NVIDIA GPU is visible."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


def _has_gpu() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


HAS_GPU = _has_gpu()


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


@pytest.fixture(scope="session")
def build_pool(tmp_path_factory: pytest.TempPathFactory):
    """One build pool (and extension cache) for the whole session, so each extension compiles once."""
    from evalfarm.build import BuildPool

    pool = BuildPool(max_workers=1, cache_dir=tmp_path_factory.mktemp("ext-cache"))
    yield pool
    pool.close()


@pytest.fixture
def tmp_path(tmp_path: Path) -> Path:
    """pytest's ``tmp_path``, reachable by the farm's workers. Run as root, a worker drops to an
    unprivileged uid (evalfarm.confine) and could not write files that a test's candidate uses
    to report what it saw (pytest makes its directories 0700): the test directory is opened to
    every user, and its two parents made traversable."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        for parent in list(tmp_path.parents)[:2]:
            parent.chmod(parent.stat().st_mode | 0o711)
        tmp_path.chmod(0o777)
    return tmp_path
