"""Scoring helpers shared by the runtime attack modules (CPU and GPU)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from evalfarm import ScoreConfig
from evalfarm.result import ScoreResult
from evalfarm.sandbox import bubblewrap
from evalfarm.scoring import as_candidate, as_task, score

RUNTIME = Path(__file__).parent / "runtime"


def score_attack(task, source: str | Path, build_pool, cfg: ScoreConfig, **changes) -> ScoreResult:
    """Score a candidate file (Path) or source text (str) under ``cfg`` with ``changes`` applied."""
    cfg = cfg.replace(**changes) if changes else cfg
    candidate = as_candidate(str(source)) if isinstance(source, Path) else as_candidate(source)
    return score(task, candidate, cfg, build_pool=build_pool)


def own_network_namespace(isolation: list[str]) -> bool:
    """Whether an evidence's isolation notes say the process had a network namespace of its own
    (the built-in sandbox's note, or bubblewrap's)."""
    return any(n == "network namespace" or (n.startswith("bubblewrap:") and "network namespaces" in n)
               for n in isolation)


@contextlib.contextmanager
def host_channel() -> Iterator[Path]:
    """A directory a candidate can write to and the test read afterwards: a way out that the
    sandbox otherwise closes (as root the test's tmp_path is unreachable for the worker's uid;
    bubblewrap shows no host directory at all), so it is opened explicitly: mode 0777, and bound
    into bubblewrap sandboxes through EVALFARM_SANDBOX_SHARED_DIR (tests and debugging only)."""
    shared = Path(tempfile.mkdtemp(prefix="evalfarm-test-channel-"))
    shared.chmod(0o777)
    before = os.environ.get(bubblewrap.SHARED_ENV)
    os.environ[bubblewrap.SHARED_ENV] = str(shared)
    try:
        yield shared
    finally:
        if before is None:
            os.environ.pop(bubblewrap.SHARED_ENV, None)
        else:
            os.environ[bubblewrap.SHARED_ENV] = before
        shutil.rmtree(shared, ignore_errors=True)


def stale_memory_attack(build_pool, tmp_path: Path, cfg: ScoreConfig) -> tuple[ScoreResult, int, int]:
    """Score ``stale_matmul.py`` on ``task_matmul_relu.py``; also (calls that reused stale x @ w, calls)."""
    task = as_task(str(RUNTIME / "task_matmul_relu.py"))
    with host_channel() as shared:
        count = shared / "reused"
        source = (RUNTIME / "stale_matmul.py").read_text().replace('COUNT_PATH = ""', f"COUNT_PATH = {str(count)!r}")
        r = score_attack(task, source, build_pool, cfg, reverify_above=0)
        assert count.exists(), (f"the candidate never wrote its count ({r.verdict.name}: {r.detail}); "
                                f"isolation: {r.evidence.isolation}")
        reused, calls = (int(v) for v in count.read_text().split())
    return r, reused, calls
