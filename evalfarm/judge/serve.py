"""The judge process's entry: a standby until its one request comes, then that evaluation.

The rule. Started per evaluation as ``python -m evalfarm.judge.launch FD --device D`` (by
``evalfarm.judge.standby``, often before the evaluation is known), whose launcher starts two fresh
workers (``evalfarm.judge.worker``) before it imports the judge; the judge then warms its device
(``warm_device``) and waits for its one request (``wait_for_request``), telling its owner once both
workers started ("standby_ready"), so the owner's running evaluations need not time their rounds
against a start-up on the same device. It evaluates that one request (evalfarm.judge.judge.Judge),
sends the result and leaves; a standby nobody takes leaves without a word. Timed rounds count only
from the owner's go (``RoundsHold``), at most ``BEFORE_ROUNDS_TIMEOUT_S`` after the judge asked.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
import threading
import time
import traceback
from typing import Any

import torch

from evalfarm import sandbox
from evalfarm.judge import framing
from evalfarm.judge.judge import Judge
from evalfarm.judge.memory_plan import warm_meta
from evalfarm.judge.setup import TaskSetup
from evalfarm.judge.task_window import WindowSpec, WindowState, request_key
from evalfarm.judge.worker_processes import StartedWorkers, start_workers
from evalfarm.result import ScoreResult
from evalfarm.sandbox import lifetime
from evalfarm.verdict import Verdict

log = logging.getLogger("evalfarm.judge")

# A standby judge's host warm-up (warm_host: PyTorch's meta kernels, which import torch._dynamo, 5-7 s
# of one core on the GPU hosts) only where this is "1". Off by default: a standby taken while it
# runs shares its interpreter with the evaluation's rounds (docs/benchmarks.md, "Shortening the
# exchange": such evaluations spent up to twice as long on correctness on an H200), and the meta
# pass it pays for is needed only by the first judge of a task (evalfarm.judge.task_facts).
META_WARMUP_ENV = "EVALFARM_STANDBY_META_WARMUP"
# How long the judge waits for its owner's go (no standby judge of the same device still starting
# up), counted from its first round; past that it goes on.
BEFORE_ROUNDS_TIMEOUT_S = 30.0

# A task window's next candidate's workers start once the current candidate has loaded (WindowHold),
# unless this is "0": then they start after its result, when the judge waits for the next request
# (next_in_window). A switch for measuring what the early start costs the current candidate's
# correctness rounds, whose device synchronisations share the GPU with the starting workers'
# CUDA contexts (docs/benchmarks.md, 2b).
WINDOW_EARLY_START_ENV = "EVALFARM_WINDOW_EARLY_START"

# When the judge's own imports were done (CLOCK_MONOTONIC; evalfarm.judge.launch sets it): the
# owner's standby_imports figure. Its workers were started before those imports.
MAIN_AT = [0.0]

# An operator's diagnostic: a directory where every judge writes a cProfile of its evaluation
# (judge-<pid>.prof; `python scripts/judge_profile_summary.py DIR` sums them). The judge's own
# Python time only: what its workers do shows as the judge waiting in its receives.
JUDGE_CPROFILE_ENV = "EVALFARM_JUDGE_CPROFILE"


class RoundsHold:
    """The owner's "go" for timed rounds: asked for once, before the first round. The owner
    answers "go" at once when no standby judge of this device is starting up, else "hold" and
    then "go" when the start-up is over (its CUDA contexts and imports must not compete with
    calls whose times count). Rounds run while held are checked as usual, but their times are
    set aside; the judge waits for the go only when it has no other work left (correctness
    done), and at most BEFORE_ROUNDS_TIMEOUT_S from the question, after which it goes on."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._asked_at = 0.0
        self._go = False

    def ask(self) -> None:
        framing.send_json(self._conn, {"op": "before_rounds"})
        self._asked_at = time.monotonic()
        self._receive(BEFORE_ROUNDS_TIMEOUT_S)  # "go" or "hold", at once

    def released(self, wait: bool = False) -> bool:
        """True once the owner said go (or the bounded wait for it ran out); with ``wait``, block
        until then, else only look."""
        if not self._go:
            left = BEFORE_ROUNDS_TIMEOUT_S - (time.monotonic() - self._asked_at)
            self._receive(max(left, 0.0) if wait else 0.0)
            if wait or left <= 0:
                self._go = True  # the owner is slow to answer: go on rather than stall the evaluation
        return self._go

    def _receive(self, timeout_s: float) -> None:
        try:
            reply = framing.recv_json(self._conn, timeout_s)
        except TimeoutError:
            return
        if reply.get("op") not in ("go", "hold"):
            raise framing.ProtocolError(f"expected go or hold, got {str(reply.get('op'))[:40]!r}")
        self._go = reply["op"] == "go"


class WindowHold:
    """The hold of a window's candidate that another may follow (evalfarm.judge.task_window): once
    the candidate has loaded (``ask``), the next candidate's two workers start, so they are up when
    its request comes; their start-up (interpreters, imports, CUDA contexts) must not compete with
    calls whose times count, so times count only once the owner said go (``RoundsHold``) *and*
    both have started, or BEFORE_ROUNDS_TIMEOUT_S after the question. The workers are fresh
    processes that have seen nothing yet; they wait beside the running candidate as a standby
    judge's workers do (docs/security.md, "Task windows")."""

    def __init__(self, owner: RoundsHold, start_next: Any) -> None:
        self.owner = owner
        self._start_next = start_next  # () -> StartedWorkers | None
        self.next: StartedWorkers | None = None
        self._asked_at = 0.0
        self._up = False

    def ask(self) -> None:
        self.next = self._start_next()
        self._asked_at = time.monotonic()
        self.owner.ask()

    def released(self, wait: bool = False) -> bool:
        if not self.owner.released(wait):
            return False
        if not self._up:
            self._up = self._next_started(wait)
        return self._up

    def _next_started(self, wait: bool) -> bool:
        """Whether the next workers have started (or failed: then nothing is left to wait for)."""
        if self.next is None:
            return True
        while True:
            left = BEFORE_ROUNDS_TIMEOUT_S - (time.monotonic() - self._asked_at)
            waiting = [w for w in self.next.workers if not w.started_seen]
            if not waiting or left <= 0:
                return True
            for w in waiting:
                try:
                    if w.conn.poll(max(0.0, min(left, 0.05)) if wait else 0):
                        w.note_started(framing.recv_json(w.conn, 0))
                except (framing.PeerClosed, framing.ProtocolError, TimeoutError, OSError, EOFError):
                    self.discard()  # a next worker that died: the window starts fresh ones later
                    return True
            if not wait and any(not w.started_seen for w in self.next.workers):
                return False

    def spared_pids(self) -> list[int]:
        """The next workers' pids, kept alive when this evaluation's are killed."""
        return [w.proc.pid for w in self.next.workers] if self.next is not None else []

    def discard(self) -> None:
        if self.next is not None:
            self.next.discard()
            self.next = None


def warm_device(device: str) -> str:
    """Create this process's CUDA context now, while no evaluation waits for it; "" or a note."""
    if not device.startswith("cuda"):
        return ""
    try:
        dev = torch.device("cuda:0" if device == "cuda" else device)
        torch.cuda.set_device(dev)
        torch.randn(16, device=dev)  # the context, and the device's random generator
    except Exception as err:  # noqa: BLE001 - the evaluation reports the device's failure itself
        return f"device not warmed: {type(err).__name__}: {err}"
    return ""


def warm_host(device: str) -> threading.Thread | None:
    """Host-only warm-up, started after the standby announced itself ready: the memory plan's
    shape-only pass (MemoryGate.before_setup, on a GPU only) pays PyTorch's lazily imported
    meta kernels in a process's first call (5-7 s on the H100 host, torch._dynamo among them).
    It runs in a thread of its own, on one CPU core and never on the device, so neither the
    owner's running evaluation nor this judge's own request waits for it: a request that comes
    first is read at once, and its shape-only pass finds the imports done or joins them (Python's
    import lock). The thread, or None off the GPU."""
    if not device.startswith("cuda"):
        return None

    def run() -> None:
        try:
            warm_meta()
        except Exception as err:  # noqa: BLE001 - only a warm-up: the evaluation pays it instead
            log.info("meta warm-up failed: %s: %s", type(err).__name__, err)

    thread = threading.Thread(target=run, name="evalfarm-meta-warm-up", daemon=True)
    thread.start()
    return thread


def host_warm_up(device: str, setting: str) -> Any:
    """What a standby runs once it has announced itself ready: ``warm_host`` where the operator
    asked for it (META_WARMUP_ENV "1"), else nothing (None)."""
    return (lambda: warm_host(device)) if setting.strip() == "1" else None


def wait_for_request(conn: Any, started: StartedWorkers | None, timeout_s: float,
                     after_ready: Any = None) -> dict[str, Any] | None:
    """Wait for the evaluation request; meanwhile, once both workers report that they started,
    tell the owner ``{"op": "standby_ready"}`` (its evaluations hold their timed rounds until
    their device's standbys are ready, so no start-up on the device competes with them) and
    then run ``after_ready()`` (host-only warm-up, which nobody is held for). None: no request
    came within ``timeout_s``, the owner went away, or a worker died while standing by."""
    from multiprocessing.connection import wait

    deadline = time.monotonic() + timeout_s
    workers = started.workers if started is not None else []
    by_conn = {w.conn: w for w in workers}
    announced = False
    while True:
        waiting = [w.conn for w in workers if not w.started_seen]
        if not waiting and not announced:
            # When (CLOCK_MONOTONIC is one clock for the host): the owner's start-up figures.
            framing.send_json(conn, {"op": "standby_ready", "at": time.monotonic(), "main_at": MAIN_AT[0]})
            announced = True
            if after_ready is not None:
                after_ready()
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        for ready in wait([conn, *waiting], left):
            if ready is conn:
                try:
                    return framing.recv_json(conn, 0)
                except (framing.PeerClosed, framing.ProtocolError, TimeoutError):
                    return None
            try:
                by_conn[ready].note_started(framing.recv_json(ready, 0))
            except (framing.PeerClosed, framing.ProtocolError, TimeoutError):
                return None  # a worker died before any evaluation: this judge is of no use


def profiled(run: Any, out_dir: str) -> Any:
    """``run()``, under cProfile with its stats written into ``out_dir`` when that is set."""
    if not out_dir:
        return run()
    import cProfile

    prof = cProfile.Profile()
    try:
        return prof.runcall(run)
    finally:
        try:
            prof.dump_stats(os.path.join(out_dir, f"judge-{os.getpid()}.prof"))
        except OSError as err:
            log.warning("judge profile not written to %s: %s", out_dir, err)


def serve(conn: Any, args: Any, started: StartedWorkers | None, hardening: list[str],
          report_pgid: Any) -> None:
    """The judge process's life after evalfarm.judge.launch started its workers: warm the
    device, wait for the request, evaluate, send the result, and leave; or, where the request
    opens a task window (evalfarm.judge.task_window), start fresh workers and serve the window's
    next candidate, until the window is full, idle or ends."""
    note = warm_device(args.device)
    if note:
        hardening = [*hardening, note]
    request = wait_for_request(conn, started, args.request_timeout,
                               host_warm_up(args.device, os.environ.get(META_WARMUP_ENV, "")))
    window: WindowState | None = None
    shared: TaskSetup | None = None
    while request is not None:
        if window is None:
            spec = WindowSpec.from_request(request)
            window = WindowState(spec, request_key(request)) if spec is not None else None
        hold: Any = RoundsHold(conn)
        if (window is not None and window.index < window.spec.max_candidates
                and os.environ.get(WINDOW_EARLY_START_ENV, "1").strip() != "0"):
            hold = WindowHold(hold, lambda: start_next_workers(args.device, report_pgid))
        try:
            judge = Judge(request, report_pgid, started, hold, lambda msg: framing.send_json(conn, msg),
                          window, shared, hold.spared_pids if isinstance(hold, WindowHold) else None)
            result = profiled(judge.run, os.environ.get(JUDGE_CPROFILE_ENV, ""))
            shared = judge.task_setup
        except Exception:  # noqa: BLE001 - the judge's own failure is the farm's fault
            result = ScoreResult.failure(Verdict.INFRA_ERROR, "judge failed:\n" + traceback.format_exc()[-4000:])
            shared = None
        result.evidence.isolation = [*result.evidence.isolation, *hardening]
        stays = window is not None and shared is not None and window.continues(result.verdict is Verdict.INFRA_ERROR)
        started = hold.next if isinstance(hold, WindowHold) else None
        # live_pgids: the worker groups still alive (the next candidate's; every other one was killed
        # and reaped): the owner forgets the rest and never signals those ids again.
        framing.send_json(conn, {"op": "result", "result": result.to_dict(), "window_open": stays,
                                 "live_pgids": [w.proc.pid for w in started.workers] if started is not None else []})
        request = None
        if stays:
            assert window is not None
            del judge, result
            request, started = next_in_window(conn, args, window, report_pgid, started)
            if request is not None:
                window.index += 1
        elif started is not None:
            started.discard()
            started = None
    # Nothing is left to serve (every evaluation's workers reaped, lease released, files wiped,
    # result sent; or a standby nobody took): leave without the interpreter's teardown. Its C++
    # destructors would print, for every CUDA arena a killed worker still mapped, "Producer process
    # has been terminated before all shared CUDA tensors released" into the user's terminal; the
    # driver frees the memory when the process ends.
    if started is not None:
        started.close()
    lifetime.kill_descendants()
    if started is not None:
        sandbox.wipe(started.tmp)
    conn.close()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def start_next_workers(device: str, report_pgid: Any) -> StartedWorkers | None:
    """Fresh workers for a window's next candidate (None, and a log line, where they cannot start)."""
    try:
        return start_workers(device, report_pgid)
    except Exception as err:  # noqa: BLE001 - the window goes on without them, or ends
        log.warning("fresh workers for the task window's next candidate did not start: %s: %s",
                    type(err).__name__, err)
        return None


def next_in_window(conn: Any, args: Any, window: WindowState, report_pgid: Any,
                   started: StartedWorkers | None = None) -> tuple[dict[str, Any] | None, StartedWorkers | None]:
    """After a window's candidate (its workers killed, reaped and wiped by Judge.run): the next
    one's workers (``started``, started during the last evaluation, or fresh ones now), then its
    request, at most ``idle_s`` away. None when none came, the owner went away, a worker died, the
    workers could not start, or the request is for another task or settings (the owner routes by
    key: a mismatch is its error, and the judge leaves rather than guess)."""
    gc.collect()
    if args.device.startswith("cuda"):
        torch.cuda.empty_cache()
    if started is not None and any(w.proc.poll() is not None for w in started.workers):
        started.discard()  # one died while it waited
        started = None
    if started is None:
        started = start_next_workers(args.device, report_pgid)
        if started is None:
            return None, None
    request = wait_for_request(conn, started, window.spec.idle_s)
    if request is not None and not window.next_request_fits(request):
        log.warning("task window ends: a request for another task or other settings")
        framing.send_json(conn, {"op": "result", "window_open": False, "result": ScoreResult.failure(
            Verdict.INFRA_ERROR, "the judge's task window got a request for another task or other settings; "
            "submit it again").to_dict()})
        request = None
    return request, started
