"""Scoring helpers shared by the runtime attack modules (CPU and GPU)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from evalfarm import ScoreConfig
from evalfarm.result import ScoreResult
from evalfarm.scoring import as_candidate, as_task, score

RUNTIME = Path(__file__).parent / "runtime"


def score_attack(task, source: str | Path, build_pool, cfg: ScoreConfig, **changes) -> ScoreResult:
    """Score a candidate file (Path) or source text (str) under ``cfg`` with ``changes`` applied."""
    cfg = cfg.replace(**changes) if changes else cfg
    candidate = as_candidate(str(source)) if isinstance(source, Path) else as_candidate(source)
    return score(task, candidate, cfg, build_pool=build_pool)


def stale_memory_attack(build_pool, tmp_path: Path, cfg: ScoreConfig) -> tuple[ScoreResult, int, int]:
    """Score ``stale_matmul.py`` on ``task_matmul_relu.py``; also (calls that reused stale x @ w, calls)."""
    task = as_task(str(RUNTIME / "task_matmul_relu.py"))
    # A directory the worker can write to after it drops to an unprivileged uid (as root, the
    # test's tmp_path is not reachable from the worker: that is the sandbox at work).
    shared = Path(tempfile.mkdtemp(prefix="evalfarm-test-count-"))
    try:
        shared.chmod(0o777)
        count = shared / "reused"
        source = (RUNTIME / "stale_matmul.py").read_text().replace('COUNT_PATH = ""', f"COUNT_PATH = {str(count)!r}")
        r = score_attack(task, source, build_pool, cfg, reverify_above=0)
        reused, calls = (int(v) for v in count.read_text().split())
    finally:
        shutil.rmtree(shared, ignore_errors=True)
    return r, reused, calls
