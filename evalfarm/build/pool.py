"""A pool of CPU build processes, separate from evaluation slots.

A build is two kinds of fresh sandboxed child (``evalfarm.build.runner``), each in its own
process group and network namespace, killed as a group when the build runs past the timeout:
one runs the candidate's module to discover its ``load_inline`` calls; then, for each call with
no verified cache entry, one compiles that call's specification (no candidate Python code runs
there) in a private directory. This process (trusted) computes every content key itself, hashes
each compiled result and installs it in the cache (``ExtensionCache.install``); no child writes
the cache. The hashes it installed are kept and handed to the worker through the judge, so an
entry changed afterwards is not loaded. Identical requests in flight are built once; the
extension cache makes repeated ones free.

A call that does not compile is not a verdict by itself: the candidate may catch the error, as
it could under plain Python. The failure (its key, the compiler's log, the exception load_inline
raised) is recorded in the report (``failed_extensions``) and handed to the worker through the
judge, where the candidate's call raises it; discover runs again with the failures raised, so a
module that catches one and calls load_inline with another source has that call built too. A
build is a verdict (``compile_error``) when the discover step saw the module let a failure out
(the worker would too; the child can only say so of a key this pool failed, so it can only cost
the candidate itself), or when a source is refused (``evalfarm.build.includes``: the farm declines
to compile it, which is no compiler's answer the candidate could handle). Failures are
remembered in this process's memory (keyed like the cache, bounded, never on disk, never a
timed-out or memory-killed build), so the same broken source is not compiled for every candidate.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import hashlib
import json
import logging
import os
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from evalfarm import sandbox
from evalfarm.build import includes
from evalfarm.build.cache import CacheTampered, ExtensionCache, extension_key
from evalfarm.build.hook import error_type, truncate, uses_inline_extensions
from evalfarm.sandbox import bubblewrap, cgroup, confine, lifetime

log = logging.getLogger(__name__)
# /tmp and /dev/shm of a build child inside bubblewrap (its compiler's temporary files go to its
# run directory, TMPDIR, on the host's disk).
BUILD_SCRATCH_BYTES = 256 << 20
# A build child's processes together (the runner, candidate code imported by discover, ninja, the
# compilers), where the host lets the pool make a cgroup (evalfarm.sandbox.cgroup): each compiler also
# has a 16 GiB address-space limit, which alone does not bound a tree of them.
BUILD_MEMORY_BYTES = 16 << 30
# How often a waiting build checks whether its cgroup's OOM killer acted.
OOM_POLL_S = 0.25
# Discover runs again (with the failures found so far raised) while a run finds a new failure: the
# first run and at most this many more in all.
MAX_DISCOVER_PASSES = 4
# Tries at describing the toolchain (trusted code) before a build fails as the farm's error.
TOOLCHAIN_ATTEMPTS = 2
# Failed builds remembered by a pool (least recently used dropped first); a log is at most 16 KB.
MAX_REMEMBERED_FAILURES = 1024
# A failed extension's log in the evidence (the COMPILE_ERROR detail keeps the whole, up to 16 KB).
EVIDENCE_LOG_CHARS = 8000


@dataclasses.dataclass
class BuildReport:
    # "ok" (every call built, or failed in a way the candidate may catch: failed_extensions) |
    # "skipped" | "compile_error" (a failure the module let out, or a refused source) | "timeout" | "error"
    status: str
    seconds: float = 0.0
    log: str = ""
    extensions: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    deduped: bool = False
    isolation: list[str] = dataclasses.field(default_factory=list)  # what the discovering child obtained
    # Calls that did not compile: {"name", "key", "type" (the exception load_inline raised),
    # "message" (its text), "log" (the compiler's output, redacted), "cache_hit" (remembered by
    # the pool: not compiled again), "seconds"}.
    failed_extensions: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    refused: bool = False  # a source refused (evalfarm.build.includes): a verdict, never raised to the candidate

    def expected_files(self) -> dict[str, dict[str, str]]:
        """``{key: file hashes}`` as the pool installed or verified them (for the worker's loads)."""
        return {str(e["key"]): e["files"] for e in self.extensions if isinstance(e.get("files"), dict)}

    def failed_builds(self) -> dict[str, dict[str, str]]:
        """``{key: {"name", "type", "message", "log"}}``: the failures the worker's load_inline raises."""
        return {str(e["key"]): {k: str(e.get(k, "")) for k in ("name", "type", "message", "log")}
                for e in self.failed_extensions}

    @property
    def cache_hits(self) -> int:
        return sum(1 for e in self.extensions if e.get("cache_hit"))

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["cache_hits"] = self.cache_hits
        # The evidence: what failed and why (the exception's message repeats the log: left out).
        d["failed_extensions"] = [{**{k: v for k, v in e.items() if k != "message"},
                                   "log": truncate(str(e.get("log", "")), EVIDENCE_LOG_CHARS)}
                                  for e in self.failed_extensions]
        return d


class BuildPoolClosed(RuntimeError):
    """The pool was closed (its owner is shutting down): no further build child starts."""


class BuildPool:
    def __init__(
        self,
        max_workers: int = 2,
        cache_dir: str | Path | None = None,
        timeout_s: float = 180.0,
        memory_limit_bytes: int = BUILD_MEMORY_BYTES,
    ) -> None:
        self.cache = ExtensionCache(cache_dir)
        self.memory_limit_bytes = memory_limit_bytes
        self.cache.sweep_stale()
        self.timeout_s = timeout_s
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers, thread_name_prefix="build")
        self._lock = threading.Lock()
        self._in_flight: dict[str, concurrent.futures.Future[BuildReport]] = {}
        # failures: builds whose report is not "ok"; failed_compiles: calls compiled here that failed;
        # failure_hits: calls whose failure was remembered (not compiled again).
        self._counts = {"builds": 0, "skipped": 0, "deduped": 0, "hits": 0, "misses": 0, "failures": 0,
                        "failed_compiles": 0, "failure_hits": 0}
        self._procs: set[subprocess.Popen] = set()
        self._closed = False
        self._tools: dict[str, dict[str, dict[str, str]]] = {}  # arch -> {"False"|"True": toolchain}
        self._installed: dict[str, dict[str, str]] = {}  # key -> file hashes, as this pool installed them
        # key -> a failed build's record, as this pool's compile child reported it (memory only:
        # nothing a candidate's process can write is ever read back as a failure).
        self._failures: collections.OrderedDict[str, dict[str, Any]] = collections.OrderedDict()

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

    @staticmethod
    def _own_dir(run_dir: str, kind: str) -> str:
        """A fresh directory for one sandboxed child, inside the build's run directory: no earlier
        child of the build (candidate code, in discover) wrote there or can reach it."""
        return tempfile.mkdtemp(prefix=f"{kind}-", dir=run_dir)

    def _child(self, request: dict[str, Any], tmp: str, arch: str, deadline: float) -> tuple[dict[str, Any] | None, str]:
        """Run one runner child in its directory ``tmp`` to completion (or the deadline); (its
        result, its output)."""
        # A name the child cannot have laid a link at before it started, read without following one.
        result_path = os.path.join(tmp, f"result-{uuid.uuid4().hex}.json")
        extra = {"CUDA_VISIBLE_DEVICES": ""}
        if "EVALFARM_WORKER_NETNS" in os.environ:
            extra["EVALFARM_WORKER_NETNS"] = os.environ["EVALFARM_WORKER_NETNS"]
        if arch.startswith("sm_"):
            extra["TORCH_CUDA_ARCH_LIST"] = f"{arch[3:-1]}.{arch[-1]}"
        request = {**request, "arch": arch, "result_path": result_path, "memory_bytes": 16 << 30}
        argv = sandbox.python_cmd("evalfarm.build.runner")
        if request.get("mode") != "toolchain":  # candidate code (discover) or sources (compile)
            argv = self._sandboxed(argv, tmp, extra)
        if self._closed:  # closed while this build waited or ran: start nothing more
            raise BuildPoolClosed("the build pool was closed")
        cg = self._cgroup()
        join_fds = cg.join_fds() if cg is not None else []
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                cwd=tmp, env=sandbox.clean_env(tmp, extra), start_new_session=True,
                # Into its cgroup before it runs anything: every process it starts is counted there.
                preexec_fn=(lambda: cgroup.join(join_fds)) if join_fds else None,
            )
        except BaseException:
            if cg is not None:
                cg.remove()
            raise
        finally:
            for jfd in join_fds:
                os.close(jfd)
        with self._lock:
            self._procs.add(proc)
            closed = self._closed  # close() may have run between the check above and now
        if closed:
            sandbox.kill_group(proc)
        oom = 0
        try:
            output = self._wait(proc, json.dumps(request).encode(), cg, deadline)
        finally:
            sandbox.kill_group(proc)  # nothing of the child outlives it, before its files are read
            if cg is not None:
                oom = cg.oom_kills()
                cg.remove()  # and whatever left its process group
            with self._lock:
                self._procs.discard(proc)
        text = truncate(output.decode("utf-8", "replace"))
        note = (f"the build's processes together passed {self.memory_limit_bytes / (1 << 30):.3g} GiB of memory "
                "(the cgroup's OOM killer ended one)\n") if oom else ""
        text = note + text
        try:
            with open(os.open(result_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)) as f:
                result = json.load(f)
            if isinstance(result, dict) and note:
                result["oom"] = True  # the farm's limit ended it: such a failure is never remembered
                if "log" in result:
                    result["log"] = note + str(result["log"] or "")
            return (result if isinstance(result, dict) else None), text
        except (OSError, ValueError):
            return None, f"build process exited with code {proc.returncode} without a result\n{text}"

    @staticmethod
    def _wait(proc: subprocess.Popen, request: bytes, cg: cgroup.Cgroup | None, deadline: float) -> bytes:
        """The child's output once it exits, or once its cgroup's OOM killer has ended one of its
        processes: a build whose processes together passed the memory total is over then, whatever
        the rest of it would do (a survivor could otherwise wait out the whole build deadline).
        TimeoutError at the deadline."""
        pending: bytes | None = request
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            try:
                output, _ = proc.communicate(pending, timeout=min(left, OOM_POLL_S) if cg is not None else left)
                return output
            except subprocess.TimeoutExpired:
                pending = None  # sent with the first call; a retry must not send it again
            if cg is not None and cg.oom_kills():
                sandbox.kill_group(proc)
                cg.kill()  # and any that left the process group, so the pipe closes
                try:
                    return proc.communicate(timeout=5)[0]
                except subprocess.TimeoutExpired:
                    return b""

    def _cgroup(self) -> cgroup.Cgroup | None:
        """A cgroup for one build child with its memory and process limits, or None where the host
        lets none be made (the child then has its per-process limits only)."""
        cg, _why = cgroup.create("build")
        if cg is None:
            return None
        try:
            cg.set_limits(self.memory_limit_bytes, sandbox.MAX_PROCESSES)
        except OSError as err:
            log.warning("build cgroup without limits (%s): not used", err)
            cg.remove()
            return None
        return cg

    def _sandboxed(self, argv: list[str], tmp: str, extra: dict[str, str]) -> list[str]:
        """``argv`` inside bubblewrap where the host has it (evalfarm.sandbox.bubblewrap; the runner's own
        namespaces otherwise): the run directory writable; system, Python, torch, the evalfarm
        package and the toolchains read-only; nothing else of the host (not the extension cache,
        which the pool alone reads, nor the daemon's token, TLS key, config or result cache). Run by
        root, the child keeps what it needs to switch to the unprivileged uid (the runner does)."""
        bwrap, why_not = bubblewrap.selected()
        if bwrap is None:
            extra[bubblewrap.NOTE_ENV] = why_not
            return argv
        view = bubblewrap.WorkerView(  # needed_paths() has the toolchain's CUDA_HOME / CUDA_PATH
            own_dir=tmp, scratch_bytes=BUILD_SCRATCH_BYTES, readable=tuple(confine.needed_paths()),
            network=not confine.own_network(), own_dir_tmpfs=False,
            become_unprivileged=confine.target_identity() is not None, shared=bubblewrap.shared_dirs())
        extra.update(bubblewrap.environment(view))
        return bubblewrap.command(bwrap, view, argv)

    def _toolchain(self, arch: str, with_cuda: bool, tmp: str, deadline: float) -> dict[str, str]:
        """The toolchain description the cache key covers (trusted code, no candidate input). A child
        that dies without a result (a crash while importing torch on a loaded host) is tried once
        more before the build fails as the farm's error."""
        if arch not in self._tools:
            for attempt in range(TOOLCHAIN_ATTEMPTS):
                result, text = self._child({"mode": "toolchain"}, tmp, arch, deadline)
                if result is not None and isinstance(result.get("tools"), dict):
                    break
                log.warning("describing the toolchain failed (attempt %d of %d): %s", attempt + 1,
                            TOOLCHAIN_ATTEMPTS, text.strip().splitlines()[0] if text.strip() else "no output")
            else:
                raise RuntimeError(f"cannot describe the toolchain: {text}")
            self._tools[arch] = result["tools"]
        return self._tools[arch][str(with_cuda)]

    def _run(self, source: str, arch: str, timeout_s: float) -> BuildReport:
        run = lifetime.RunDir("build")  # removed below, or by the next daemon's sweep if this one dies
        tmp = run.path
        start = time.monotonic()
        deadline = start + timeout_s
        extensions: list[dict[str, Any]] = []
        failed: dict[str, dict[str, Any]] = {}  # key -> failure, in the order found
        try:
            seen: set[str] = set()
            isolation: list[str] = []
            for _ in range(MAX_DISCOVER_PASSES):
                raised = {k: {f: str(v.get(f, "")) for f in ("name", "type", "message", "log")}
                          for k, v in failed.items()}
                found, text = self._child({"mode": "discover", "source": source, "failed": raised},
                                          self._own_dir(tmp, "discover"), arch, deadline)
                if found is None:
                    return self._count(BuildReport("error", time.monotonic() - start, text,
                                                   failed_extensions=list(failed.values())))
                isolation = isolation or [str(x) for x in found.get("isolation", [])][:8]
                new_failure = False
                for ext in found.get("extensions", []):
                    if not isinstance(ext, dict) or not isinstance(ext.get("spec"), dict):
                        continue
                    spec = ext["spec"]
                    key = self._key(spec, arch, tmp, deadline)
                    if key in seen:
                        continue
                    seen.add(key)
                    done = self._ensure(spec, key, arch, tmp, deadline)
                    if isinstance(done, BuildReport):
                        done.seconds = time.monotonic() - start
                        done.extensions, done.failed_extensions = extensions, list(failed.values())
                        return self._count(done)
                    if done.get("failed"):
                        failed[key] = done
                        new_failure = True
                    else:
                        extensions.append(done)
                uncaught = found.get("uncaught_failure")
                if isinstance(uncaught, str) and uncaught in raised:
                    # The module let a failure out with it raised: so would the worker's (same module,
                    # same failure). COMPILE_ERROR now, with the compiler's log, without a judge.
                    return self._count(BuildReport(
                        "compile_error", time.monotonic() - start, failed[uncaught]["log"], extensions,
                        isolation=isolation, failed_extensions=list(failed.values())))
                if not new_failure:
                    break
            return self._count(BuildReport("ok", time.monotonic() - start, truncate(text), extensions,
                                           isolation=isolation, failed_extensions=list(failed.values())))
        except (bubblewrap.SandboxUnavailable, BuildPoolClosed) as err:
            return self._count(BuildReport("error", time.monotonic() - start, str(err)))
        except TimeoutError:
            return self._count(BuildReport(
                "timeout", time.monotonic() - start,
                f"build did not finish within {timeout_s:.0f} s; its process group was killed",
                extensions, failed_extensions=list(failed.values())))
        finally:
            run.close()

    def _key(self, spec: dict[str, Any], arch: str, tmp: str, deadline: float) -> str:
        """The content key of one reported call, computed here (never the child's word)."""
        with_cuda = bool(spec.get("cuda_sources")) or bool(spec.get("with_cuda"))
        return extension_key(spec, self._toolchain(arch, with_cuda, tmp, deadline))

    def _ensure(self, spec: dict[str, Any], key: str, arch: str, tmp: str,
                deadline: float) -> dict[str, Any] | BuildReport:
        """The cache entry for one reported ``load_inline`` call, verified or freshly compiled and
        installed here; its failure record (``"failed": True``) when it does not compile (remembered
        from an earlier build, or compiled now); a BuildReport when it may not be built at all (a
        refused source) or the build runner failed."""
        t0 = time.monotonic()
        name = str(spec.get("name", ""))
        build_dir = os.path.join(tmp, "compile", key)
        refused = includes.refused_include(_sources(spec), build_dir)  # checked here, not only by a child
        if refused:
            return BuildReport("compile_error", 0.0, f"building extension {name!r} refused: {refused}", refused=True)
        with self._lock:
            remembered = self._failures.get(key)
            if remembered is not None:
                self._failures.move_to_end(key)
        if remembered is not None:
            return {**remembered, "cache_hit": True, "seconds": time.monotonic() - t0}
        note = ""
        try:
            meta = self.cache.verify(key)
            known = self._installed.get(key)
            if known is None or known == meta["files"]:
                self._installed[key] = meta["files"]
                return {"name": name, "key": key, "cache_hit": True, "seconds": time.monotonic() - t0,
                        "so_path": str(self.cache.entry_dir(key) / f"{name}.so"), "files": meta["files"]}
            note = f"cache entry {key[:12]}: differs from what this pool installed"
        except FileNotFoundError:
            pass
        except CacheTampered as err:
            note = str(err)
        if note:
            log.warning("event=cache_entry_tampered key=%s detail=%r", key, note)
            self.cache.evict(key)
            note += "; rebuilt and reinstalled"
        own = self._own_dir(tmp, "compile")
        build_dir = os.path.join(own, key)
        os.mkdir(build_dir)
        result, text = self._child({"mode": "compile", "spec": spec, "build_dir": build_dir}, own, arch, deadline)
        if result is None or result.get("status") not in ("ok", "compile_error", "refused"):
            return BuildReport("error", 0.0, text)
        if result["status"] == "refused":
            return BuildReport("compile_error", 0.0, truncate(str(result.get("log") or text)), refused=True)
        if result["status"] == "compile_error":
            failure = {"name": name, "key": key, "failed": True, "type": error_type(result.get("type")),
                       "message": truncate(str(result.get("message") or result.get("log") or text)),
                       "log": truncate(str(result.get("log") or text))}
            if not result.get("oom"):
                with self._lock:
                    self._failures[key] = failure
                    while len(self._failures) > MAX_REMEMBERED_FAILURES:
                        self._failures.popitem(last=False)
            return {**failure, "cache_hit": False, "seconds": time.monotonic() - t0}
        entry, install_note = self.cache.install(key, Path(build_dir), {"spec": spec, "seconds": time.monotonic() - t0})
        files = self.cache.verify(key)["files"]
        self._installed[key] = files
        out = {"name": name, "key": key, "cache_hit": False, "seconds": time.monotonic() - t0,
               "so_path": str(entry / f"{name}.so"), "files": files}
        if note or install_note:
            out["note"] = note or install_note
        return out

    def _count(self, report: BuildReport) -> BuildReport:
        with self._lock:
            self._counts["builds"] += 1
            if report.status != "ok":
                self._counts["failures"] += 1
            for e in report.extensions:
                self._counts["hits" if e.get("cache_hit") else "misses"] += 1
            for e in report.failed_extensions:
                self._counts["failure_hits" if e.get("cache_hit") else "failed_compiles"] += 1
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


def _sources(spec: dict[str, Any]) -> list[str]:
    """A reported call's C++ and CUDA sources (the report is a child's: only strings count)."""
    out: list[str] = []
    for field in ("cpp_sources", "cuda_sources"):
        value = spec.get(field)
        out += [value] if isinstance(value, str) else [v for v in value if isinstance(v, str)] \
            if isinstance(value, list) else []
    return out
