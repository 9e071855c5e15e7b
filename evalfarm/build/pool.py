"""A pool of CPU build processes, separate from evaluation slots.

Each build is a fresh sandboxed child (``evalfarm.build.runner``) in its own process
group, killed as a group when it runs past the timeout. Identical requests in flight are
built once; the extension cache makes repeated ones free.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import json
import logging
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from evalfarm import lifetime, sandbox
from evalfarm.build.cache import ExtensionCache
from evalfarm.build.hook import truncate, uses_inline_extensions

log = logging.getLogger(__name__)


@dataclasses.dataclass
class BuildReport:
    status: str  # "ok" | "skipped" | "compile_error" | "timeout" | "error"
    seconds: float = 0.0
    log: str = ""
    extensions: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    deduped: bool = False

    @property
    def cache_hits(self) -> int:
        return sum(1 for e in self.extensions if e.get("cache_hit"))

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["cache_hits"] = self.cache_hits
        return d


class BuildPool:
    def __init__(
        self,
        max_workers: int = 2,
        cache_dir: str | Path | None = None,
        timeout_s: float = 180.0,
    ) -> None:
        self.cache = ExtensionCache(cache_dir)
        self.cache.sweep_stale()
        self.timeout_s = timeout_s
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers, thread_name_prefix="build")
        self._lock = threading.Lock()
        self._in_flight: dict[str, concurrent.futures.Future[BuildReport]] = {}
        self._counts = {"builds": 0, "skipped": 0, "deduped": 0, "hits": 0, "misses": 0, "failures": 0}
        self._procs: set[subprocess.Popen] = set()
        self._closed = False

    @property
    def cache_dir(self) -> Path:
        return self.cache.root

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {**self._counts, "in_flight": len(self._in_flight)}

    def submit(self, source: str, arch: str, timeout_s: float | None = None) -> concurrent.futures.Future[BuildReport]:
        if not uses_inline_extensions(source):
            with self._lock:
                self._counts["skipped"] += 1
            fut: concurrent.futures.Future[BuildReport] = concurrent.futures.Future()
            fut.set_result(BuildReport(status="skipped"))
            return fut
        key = hashlib.sha256(f"{arch}\0{source}".encode()).hexdigest()
        with self._lock:
            if self._closed:
                raise RuntimeError("build pool is closed")
            existing = self._in_flight.get(key)
            if existing is not None:
                self._counts["deduped"] += 1
                return existing
            fut = self._executor.submit(self._run, source, arch, timeout_s or self.timeout_s)
            self._in_flight[key] = fut
        fut.add_done_callback(lambda _f, k=key: self._forget(k))
        return fut

    def build(self, source: str, arch: str, timeout_s: float | None = None) -> BuildReport:
        return self.submit(source, arch, timeout_s).result()

    def _forget(self, key: str) -> None:
        with self._lock:
            self._in_flight.pop(key, None)

    def _run(self, source: str, arch: str, timeout_s: float) -> BuildReport:
        run = lifetime.RunDir("build")  # removed below, or by the next daemon's sweep if this one dies
        tmp = run.path
        result_path = os.path.join(tmp, "result.json")
        extra = {"CUDA_VISIBLE_DEVICES": ""}
        if arch.startswith("sm_"):
            extra["TORCH_CUDA_ARCH_LIST"] = f"{arch[3:-1]}.{arch[-1]}"
        request = {"source": source, "arch": arch, "cache_dir": str(self.cache.root),
                   "result_path": result_path, "memory_bytes": 16 << 30}
        start = time.monotonic()
        proc = None
        try:
            proc = subprocess.Popen(
                sandbox.python_cmd("evalfarm.build.runner"),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                cwd=tmp, env=sandbox.clean_env(tmp, {**extra, **run.env()}), start_new_session=True,
            )
            with self._lock:
                self._procs.add(proc)
            try:
                output, _ = proc.communicate(json.dumps(request).encode(), timeout=timeout_s)
            except subprocess.TimeoutExpired:
                sandbox.kill_group(proc)
                output = b""
                return self._count(BuildReport(
                    "timeout", time.monotonic() - start,
                    f"build did not finish within {timeout_s:.0f} s; its process group was killed",
                ))
            text = truncate(output.decode("utf-8", "replace"))
            try:
                with open(result_path) as f:
                    result = json.load(f)
            except (OSError, ValueError):
                return self._count(BuildReport(
                    "error", time.monotonic() - start,
                    f"build process exited with code {proc.returncode} without a result\n{text}",
                ))
            status = result.get("status")
            if status not in ("ok", "compile_error"):
                status = "error"
            report = BuildReport(
                status=status,
                seconds=time.monotonic() - start,
                log=truncate(result.get("log") or text),
                extensions=[e for e in result.get("extensions", []) if isinstance(e, dict)],
            )
            return self._count(report)
        finally:
            if proc is not None:
                sandbox.kill_group(proc)
                with self._lock:
                    self._procs.discard(proc)
            run.close()

    def _count(self, report: BuildReport) -> BuildReport:
        with self._lock:
            self._counts["builds"] += 1
            if report.status != "ok":
                self._counts["failures"] += 1
            for e in report.extensions:
                self._counts["hits" if e.get("cache_hit") else "misses"] += 1
        return report

    def close(self) -> None:
        with self._lock:
            self._closed = True
            procs = list(self._procs)
        for p in procs:
            sandbox.kill_group(p)
        self._executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> BuildPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
