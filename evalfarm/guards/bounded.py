"""Static analysis out of the calling process: a small pool of child processes, each request
bounded in time and memory.

``check_candidate_source`` here has the signature and results of
:func:`evalfarm.guards.analysis.check_candidate_source`, but the parse and the rules run in a
child (``python -m evalfarm.guards.bounded FD``) with an address-space limit, and the caller waits
at most ``timeout_s``. A daemon's event loop, and its health checks, never wait on a pathological
source (deep nesting, a 50 MB file, a huge string); the source gets a verdict within the bound:

* it does not parse, is nested too deeply, or its analysis runs out of memory (``MemoryError`` in
  the child, or the child killed): :class:`CandidateSyntaxError` (COMPILE_ERROR), as before;
* its analysis runs past ``timeout_s`` with the child busy on it: :class:`StaticAnalysisLimit`
  (a ``CandidateSyntaxError``, so COMPILE_ERROR too), naming the bound;
* the child got too little CPU time to say (a host overloaded by others), or could not start:
  :class:`StaticAnalysisUnavailable` (the farm's fault: INFRA_ERROR, never cached).

A child that timed out or died is killed and replaced; healthy ones are reused across requests.
A child exits when its channel closes (the process that started it ended); a request's CPU time
is also capped in the child (``RLIMIT_CPU``), so an analysis nobody waits for cannot run on.
(Not ``PR_SET_PDEATHSIG``: that fires when the *thread* that started the child ends, and children
are started from short-lived evaluation threads.)
"""

from __future__ import annotations

import atexit
import collections
import dataclasses
import hashlib
import logging
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from evalfarm.guards.findings import CandidateSyntaxError, Finding
from evalfarm.guards.policy import GuardPolicy
from evalfarm.judge import framing
from evalfarm.sandbox.procfs import stat_fields

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = float(os.environ.get("EVALFARM_STATIC_TIMEOUT_S", "30"))
DEFAULT_MEMORY_BYTES = int(os.environ.get("EVALFARM_STATIC_MEMORY_BYTES", str(2 << 30)))
# A timed-out analysis is the source's fault only when the child had the CPU for at least this
# share of the bound; less, and the host was too busy to tell.
MIN_CPU_SHARE = 0.5
START_TIMEOUT_S = 60.0
MAX_FINDINGS = 1000  # what one reply carries (every blocking finding first)


class StaticAnalysisLimit(CandidateSyntaxError):
    """The source's analysis ran past its time bound: the candidate is not accepted (COMPILE_ERROR)."""


class StaticAnalysisUnavailable(RuntimeError):
    """The analysis could not be run or timed fairly (the farm's fault: INFRA_ERROR)."""


class _Child:
    """One analysis process and our end of its channel."""

    def __init__(self, memory_bytes: int) -> None:
        self.conn, theirs = framing.channel_pair()
        fd = theirs.fileno()
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL")}
        env.update(PYTHONPATH=_project_root(), PYTHONDONTWRITEBYTECODE="1", PYTHONNOUSERSITE="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "evalfarm.guards.bounded", str(fd), str(memory_bytes)], pass_fds=(fd,),
            env=env, start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, cwd="/")
        theirs.close()
        try:
            hello = framing.recv_json(self.conn, START_TIMEOUT_S)
        except (TimeoutError, framing.PeerClosed, framing.ProtocolError) as err:
            self.kill()
            raise StaticAnalysisUnavailable(f"the static analysis process did not start: {type(err).__name__}") from None
        if hello.get("op") != "ready":
            self.kill()
            raise StaticAnalysisUnavailable(f"the static analysis process sent {str(hello)[:200]} at start")

    def cpu_seconds(self) -> float:
        """User + system CPU time the child has used so far (0 when unreadable)."""
        try:
            fields = stat_fields(self.proc.pid)
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") if fields is not None else 0.0
        except (ValueError, IndexError):
            return 0.0

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.conn.close()


def _project_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class StaticCheckPool:
    """Up to ``size`` analysis children, started on demand and reused; thread-safe."""

    def __init__(self, size: int = 2, timeout_s: float = DEFAULT_TIMEOUT_S,
                 memory_bytes: int = DEFAULT_MEMORY_BYTES) -> None:
        self.timeout_s = timeout_s
        self.memory_bytes = memory_bytes
        self._slots = threading.BoundedSemaphore(size)
        self._idle: list[_Child] = []
        self._lock = threading.Lock()
        self._closed = False

    def check(self, source: str, policy: GuardPolicy, reference_source: str | None = None) -> list[Finding]:
        """Findings for ``source``, as :func:`evalfarm.guards.analysis.check_candidate_source` gives them."""
        request = {"op": "check", "policy": dataclasses.asdict(policy), "reference_source": reference_source,
                   "timeout_s": self.timeout_s}
        with self._slots:
            child = self._take()
            healthy = False
            try:
                reply = self._ask(child, request, source.encode("utf-8", "surrogatepass"))
                healthy = True
            finally:
                self._give_back(child, healthy)
        if "syntax_error" in reply:
            line = reply.get("line")
            raise CandidateSyntaxError(str(reply["syntax_error"]), line if isinstance(line, int) else None)
        return [Finding(str(f["guard"]), str(f["reason"]), f.get("line"), bool(f.get("blocking")))
                for f in reply["findings"]]

    def _ask(self, child: _Child, request: dict[str, Any], source: bytes) -> dict[str, Any]:
        cpu0, t0 = child.cpu_seconds(), time.monotonic()
        try:
            framing.send_json(child.conn, request)
            child.conn.send_bytes(source)  # raw: a 50 MB source needs no JSON escaping
            reply = framing.recv_json(child.conn, self.timeout_s)
        except TimeoutError:
            cpu = child.cpu_seconds() - cpu0
            if cpu < MIN_CPU_SHARE * self.timeout_s:
                raise StaticAnalysisUnavailable(
                    f"static analysis did not finish within {self.timeout_s:g} s, having had only {cpu:.1f} s of "
                    "CPU time (the host is overloaded); try again") from None
            raise StaticAnalysisLimit(
                f"static analysis of the candidate did not finish within its bound of {self.timeout_s:g} s "
                f"({time.monotonic() - t0:.1f} s, {cpu:.1f} s of CPU); a source this large or this deeply "
                "nested is not accepted") from None
        except (framing.PeerClosed, OSError):
            code = child.proc.poll()
            if code is None:
                try:
                    code = child.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    code = None
            why = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
            raise CandidateSyntaxError(
                f"static analysis of the candidate ran out of its {self.memory_bytes >> 20} MiB memory bound or "
                f"crashed ({why}); a source this large or this deeply nested is not accepted") from None
        except framing.ProtocolError as err:
            raise StaticAnalysisUnavailable(f"the static analysis process sent a bad reply: {err}") from None
        if "findings" not in reply and "syntax_error" not in reply:
            raise StaticAnalysisUnavailable(f"the static analysis process failed: {str(reply.get('error'))[:2000]}")
        return reply

    def _take(self) -> _Child:
        with self._lock:
            if self._closed:
                raise StaticAnalysisUnavailable("the static analysis pool is closed")
            while self._idle:
                child = self._idle.pop()
                if child.proc.poll() is None:
                    return child
                child.kill()
        return _Child(self.memory_bytes)

    def _give_back(self, child: _Child, healthy: bool) -> None:
        with self._lock:
            if healthy and not self._closed and child.proc.poll() is None:
                self._idle.append(child)
                return
        child.kill()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for child in idle:
            child.kill()


_default: StaticCheckPool | None = None
_default_lock = threading.Lock()


def default_pool() -> StaticCheckPool:
    global _default
    with _default_lock:
        if _default is None:
            _default = StaticCheckPool()
            atexit.register(_default.close)
        return _default


class _Outcomes:
    """The last analyses' outcomes by content (source, reference, policy): a daemon checks a
    candidate when it is admitted (to build ahead) and again when its evaluation starts; the
    second is answered here. Findings, and a source that does not parse, are kept; an analysis
    that ran past its time bound (StaticAnalysisLimit) or could not run (StaticAnalysisUnavailable)
    never is, so it is run again."""

    def __init__(self, size: int = 256) -> None:
        self._size = size
        self._kept: collections.OrderedDict[str, tuple[Finding, ...] | CandidateSyntaxError] = (
            collections.OrderedDict())
        self._lock = threading.Lock()
        self.hits = 0

    @staticmethod
    def key(source: str, policy: GuardPolicy, reference_source: str | None) -> str:
        h = hashlib.sha256()
        for part in (source, "\0", reference_source or "", "\0", repr(policy)):
            h.update(part.encode("utf-8", "surrogatepass"))
        return h.hexdigest()

    def get(self, key: str) -> list[Finding] | None:
        with self._lock:
            kept = self._kept.get(key)
            if kept is None:
                return None
            self._kept.move_to_end(key)
            self.hits += 1
        if isinstance(kept, CandidateSyntaxError):
            raise type(kept)(str(kept), kept.line)
        return list(kept)

    def put(self, key: str, outcome: list[Finding] | CandidateSyntaxError) -> None:
        with self._lock:
            self._kept[key] = outcome if isinstance(outcome, CandidateSyntaxError) else tuple(outcome)
            self._kept.move_to_end(key)
            while len(self._kept) > self._size:
                self._kept.popitem(last=False)


OUTCOMES = _Outcomes()


def check_candidate_source(source: str, policy: GuardPolicy = GuardPolicy(),  # noqa: B008 - frozen
                           reference_source: str | None = None) -> list[Finding]:
    """:func:`evalfarm.guards.analysis.check_candidate_source`, run in the default bounded pool
    (or answered from the outcomes of the same content already analysed)."""
    key = OUTCOMES.key(source, policy, reference_source)
    kept = OUTCOMES.get(key)  # raises a kept CandidateSyntaxError
    if kept is not None:
        return kept
    try:
        findings = default_pool().check(source, policy, reference_source)
    except StaticAnalysisLimit:
        raise  # depends on the bound and the host's load at the time: never kept
    except CandidateSyntaxError as err:
        OUTCOMES.put(key, err)
        raise
    OUTCOMES.put(key, findings)
    return list(findings)


# --- the child --------------------------------------------------------------------------
def _serve(fd: int, memory_bytes: int) -> None:
    from multiprocessing.connection import Connection

    from evalfarm.guards.analysis import check_candidate_source as analyse

    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    conn = Connection(fd)
    framing.send_json(conn, {"op": "ready"})
    while True:
        try:
            msg = framing.recv_json(conn, None)
            source = conn.recv_bytes().decode("utf-8", "surrogatepass")  # from the trusted parent: no bound
        except (framing.PeerClosed, framing.ProtocolError, EOFError, OSError):
            return
        _cpu_bound(2 * float(msg.get("timeout_s", DEFAULT_TIMEOUT_S)) + 5)
        try:
            findings = analyse(source, GuardPolicy(**msg["policy"]), msg.get("reference_source"))
            if len(findings) > MAX_FINDINGS:  # every blocking one, then the first others
                findings = ([f for f in findings if f.blocking] + [f for f in findings if not f.blocking])[:MAX_FINDINGS]
            reply: dict[str, Any] = {"findings": [f.to_dict() for f in findings]}
        except CandidateSyntaxError as err:
            reply = {"syntax_error": str(err), "line": err.line}
        except MemoryError:
            reply = {"syntax_error": f"static analysis of the candidate ran out of its {memory_bytes >> 20} MiB "
                                     "memory bound; a source this large is not accepted"}
        except Exception as err:  # noqa: BLE001 - reported to the parent as the farm's fault
            reply = {"error": f"{type(err).__name__}: {err}"}
        try:
            framing.send_json(conn, reply)
        except (OSError, MemoryError):
            return
        del msg, reply, source


def _cpu_bound(seconds: float) -> None:
    """Let this process use at most ``seconds`` more CPU time (SIGXCPU ends it past that): an
    analysis whose parent gave up on it, or died, cannot run on."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(usage.ru_utime + usage.ru_stime + seconds) + 1
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    resource.setrlimit(resource.RLIMIT_CPU, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))


if __name__ == "__main__":
    _serve(int(sys.argv[1]), int(sys.argv[2]))
