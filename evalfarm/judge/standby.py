"""Judge processes started ahead of the evaluations that will use them.

Starting a judge costs seconds: an interpreter, ``import torch``, a CUDA context, and two worker
processes that do the same. None of it depends on the candidate or the task, only on the device.
``JudgeProcess`` starts a judge for a device; the judge starts its two workers at once and warms
their device, then waits for its evaluation request. ``WarmJudges`` keeps a number of such
processes ready per device, so an evaluation takes one that has already paid its start-up and a
replacement starts in its place.

Isolation is unchanged: a judge's workers serve exactly one evaluation and die with it; a
standby has seen no task and no candidate, and nothing of a candidate passes to the next (fresh
workers, a fresh private directory, fresh arenas, fresh inputs). With a ``window``
(evalfarm.judge.task_window), a judge whose evaluation ended well is *parked* under its request's
key and serves the next evaluation of the same task and settings, which is spared the task's
set-up; a parked judge not taken within the window's idle time exits by itself and is reaped here.
A standby that waited longer than its idle timeout exits by itself; one that died is replaced when
it would be taken.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections import deque
from typing import Any

from evalfarm import sandbox
from evalfarm.judge import bytecode, framing
from evalfarm.judge.task_facts import TaskFacts
from evalfarm.judge.task_window import WindowSpec
from evalfarm.sandbox import lifetime

log = logging.getLogger(__name__)

# How long a judge waits for its request before it exits (a standby nobody took).
DEFAULT_IDLE_TIMEOUT_S = 1800.0
# A standby this close to its idle timeout is not handed out (it might exit mid-request).
IDLE_MARGIN_S = 60.0
# How long a cold judge (started for immediate use) waits for its request.
COLD_REQUEST_TIMEOUT_S = 60.0
# How long ``take`` waits for the pool's thread to start a judge before starting one itself.
COLD_START_WAIT_S = 30.0
# A parked judge this close to the end of its window's idle wait is not handed out.
WINDOW_MARGIN_S = 2.0


class JudgeProcess:
    """One judge process, its run directory and its workers' process groups; owned by its taker.

    ``kill()`` ends all of it; ``close()`` also removes the run directory. The judge starts its
    workers before it knows the evaluation, and reports their process groups as
    ``{"op": "worker", "pgid": N}`` messages, read by ``note_message``.
    """

    def __init__(self, device: str, request_timeout_s: float = COLD_REQUEST_TIMEOUT_S) -> None:
        self.device = device
        self.request_timeout_s = request_timeout_s
        self.run_dir = lifetime.RunDir("eval")
        self.worker_pgids: list[int] = []
        self.ready = False  # it reported {"op": "standby_ready"}: its workers and device are up
        self.startup: dict[str, float] = {}  # standby_imports, standby_startup (seconds after spawn)
        self.started = time.monotonic()
        self._closed = False
        # The thread that started it: the judge dies with that thread (PR_SET_PDEATHSIG), so only a
        # judge started by WarmJudges' own thread may outlive its first evaluation (``park``).
        self.parent_thread = threading.current_thread()
        # Parked for a task window: the key of its task and settings, and until when it waits.
        self.window_key = ""
        self.parked_until = 0.0
        tmp = tempfile.mkdtemp(prefix="judge-", dir=self.run_dir.path)
        os.chmod(tmp, 0o711)
        try:
            env = sandbox.judge_env(tmp, {**self.run_dir.env(), "EVALFARM_PARENT_PID": str(os.getpid())},
                                    bytecode.judge_cache(device))
        except BaseException:
            self.run_dir.close()
            raise
        self.conn, child_sock = framing.channel_pair()
        fd = child_sock.fileno()
        try:
            self.proc = subprocess.Popen(
                [*sandbox.python_cmd("evalfarm.judge.launch"), str(fd), "--device", device,
                 "--request-timeout", f"{request_timeout_s:g}"],
                pass_fds=(fd,), cwd=tmp, env=env, start_new_session=True, stdin=subprocess.DEVNULL,
            )
        except BaseException:
            self.conn.close()
            self.run_dir.close()
            raise
        finally:
            child_sock.close()

    @property
    def age_s(self) -> float:
        return time.monotonic() - self.started

    def usable(self) -> bool:
        """Alive, and far enough from its idle timeout (a parked judge's: its window's) to take a request."""
        if self._closed or self.proc.poll() is not None:
            return False
        if self.window_key:
            return time.monotonic() < self.parked_until
        return self.age_s < self.request_timeout_s - IDLE_MARGIN_S

    def park(self, key: str, idle_s: float, live: list[int] | None = None) -> None:
        """Its evaluation ended with the window open: it waits at most ``idle_s`` for a request
        with ``key``, with the next candidate's workers (their process groups reported as they
        start). ``live``: the worker groups the judge says are still alive; every other one known
        was killed and reaped by the judge and is never signalled again (None: none is alive)."""
        self.window_key = key
        # Taken no later than this, so the request is read before the judge's own idle wait ends.
        self.parked_until = time.monotonic() + max(0.0, idle_s - min(WINDOW_MARGIN_S, idle_s / 4))
        alive = set(live or ())
        self.worker_pgids = [p for p in self.worker_pgids if p in alive]
        self.ready = False  # until its next workers have started ("standby_ready")

    def note_message(self, msg: dict[str, Any]) -> bool:
        """Record a worker's process group or the judge's readiness; True when ``msg`` was one."""
        if msg.get("op") == "worker" and isinstance(msg.get("pgid"), int) and not isinstance(msg["pgid"], bool):
            self.worker_pgids.append(msg["pgid"])
            return True
        if msg.get("op") == "standby_ready":
            self.ready = True
            # Its start-up by the host's monotonic clock: interpreter and imports, then all of it.
            for key, name in (("main_at", "standby_imports"), ("at", "standby_startup")):
                at = msg.get(key)
                # Once: a parked judge (task window) says "ready" again, long after its own start-up.
                if name not in self.startup and isinstance(at, float) and at >= self.started:
                    self.startup[name] = round(at - self.started, 3)
            return True
        return False

    def _drain_reports(self) -> None:
        """Read the worker reports already sent (never blocks)."""
        try:
            while self.conn.poll(0):
                self.note_message(framing.recv_json(self.conn, 0))
        except (OSError, EOFError, TimeoutError, framing.ProtocolError):
            pass

    def kill(self) -> None:
        """SIGKILL the judge's and its workers' process groups (the workers also die with the judge).
        Safe from any thread: it reads nothing (the owner's thread may be reading the channel)."""
        for pgid in self.worker_pgids:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        sandbox.kill_group(self.proc)

    def close(self) -> None:
        """Kill and remove everything; call from the thread that reads the channel (or a pool's)."""
        if self._closed:
            return
        if not self.conn.closed:
            self._drain_reports()  # worker groups reported but not yet read
        self.kill()
        self._closed = True
        self.conn.close()
        self.run_dir.close()


class WarmJudges:
    """Judges started ahead, ``depth[device]`` of them per device; thread-safe.

    ``take(device)`` hands out the oldest usable standby (or starts one now when none is ready)
    and asks for a replacement, so the next evaluation finds one that has paid its start-up while
    this one ran. A device with no depth gets a judge started on demand, as without this class.

    Standbys are started by one thread of this object that lives as long as it does: a judge dies
    with the thread that started it (PR_SET_PDEATHSIG follows the parent thread), so a standby
    must not be started by an evaluation's thread. That thread also replaces, every
    ``CHECK_INTERVAL_S``, standbys that died or neared their idle timeout.
    """

    CHECK_INTERVAL_S = 10.0

    def __init__(self, depth: dict[str, int], idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
                 hold_rounds: bool = True, window: WindowSpec | None = None, max_parked: int = 2) -> None:
        if any(n < 0 for n in depth.values()):
            raise ValueError(f"standby depth must be >= 0, got {depth}")
        if idle_timeout_s <= IDLE_MARGIN_S:
            raise ValueError(f"idle timeout must exceed {IDLE_MARGIN_S:g} s, got {idle_timeout_s:g}")
        self.depth = {d: n for d, n in depth.items() if n > 0}
        self.idle_timeout_s = idle_timeout_s
        self.task_facts = TaskFacts()  # what its judges learned about their tasks, for the next ones
        # Evaluations set aside the times of rounds run while a standby of their device starts up
        # (``wait_ready``); False: they time them too (the operator's --standby-hold off).
        self.hold_rounds = hold_rounds
        self._ready: dict[str, deque[JudgeProcess]] = {d: deque() for d in self.depth}
        # Task windows (evalfarm.judge.task_window): None or a spec of one candidate keeps none.
        self.window = window if window is not None and window.enabled else None
        if max_parked < 1:
            raise ValueError(f"max_parked must be >= 1, got {max_parked}")
        self.max_parked = max_parked  # per device: the oldest parked judge beyond it is closed
        self._parked: dict[str, deque[JudgeProcess]] = {}  # device -> parked judges, oldest first
        self.taken_window = 0
        # With windows, a judge needed now and not standing by is started by this object's thread
        # too (so it may be parked after its evaluation): how many are asked for, and those started.
        self._cold_wanted: dict[str, int] = {}
        self._cold: dict[str, deque[JudgeProcess]] = {}
        self._cond = threading.Condition()
        self._closed = False
        self._wanted = False  # a top-up was asked for
        self._passes = 0  # top-ups done by the starter thread
        self.taken_warm = 0  # counters for metrics and the benchmark
        self.taken_cold = 0
        self._starter = threading.Thread(target=self._start_standbys, name="evalfarm-standby-judges", daemon=True)
        self._starter.start()

    def _start_standbys(self) -> None:
        with self._cond:
            while True:
                if not self._wanted and not any(self._cold_wanted.values()):
                    self._cond.wait(self.CHECK_INTERVAL_S)
                if self._closed:
                    return
                self._start_cold()
                self._wanted = False
                for device in self.depth:
                    self._top_up(device)
                self._prune_parked()
                self._passes += 1
                self._cond.notify_all()

    def _top_up(self, device: str) -> None:
        ready = self._ready[device]
        for stale in [j for j in ready if not j.usable()]:
            ready.remove(stale)
            stale.close()
        while not self._closed and len(ready) < self.depth[device]:
            try:
                ready.append(JudgeProcess(device, self.idle_timeout_s))
            except OSError as err:  # no processes or files left: evaluations start judges on demand
                log.warning("event=standby_start_failed device=%s error=%r", device, err)
                return

    def fill(self, timeout_s: float = 60.0) -> None:
        """Start standbys until every device has its depth, and wait for that (a daemon calls this
        when it starts); the processes' own start-up goes on in the background."""
        with self._cond:
            target = self._passes + 1
            self._wanted = True
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._passes >= target or self._closed, timeout_s)

    def _start_cold(self) -> None:
        """Start the judges takers asked for now (``take`` with windows on); under the lock."""
        for device, n in list(self._cold_wanted.items()):
            self._cold_wanted[device] = 0
            for _ in range(n):
                try:
                    self._cold.setdefault(device, deque()).append(JudgeProcess(device))
                except OSError as err:  # the taker starts one itself
                    log.warning("event=judge_start_failed device=%s error=%r", device, err)
        self._cond.notify_all()

    def _prune_parked(self) -> None:
        """Close parked judges whose window ended (idle, or they left); under the lock."""
        for parked in self._parked.values():
            for stale in [j for j in parked if not j.usable()]:
                parked.remove(stale)
                stale.close()

    def window_request(self) -> dict[str, Any] | None:
        """What a judge request carries to open a task window (None: windows are off)."""
        return self.window.to_dict() if self.window is not None else None

    def park(self, judge: JudgeProcess, key: str, live: list[int] | None = None) -> bool:
        """Keep ``judge`` (its evaluation ended with its window open) for the next evaluation with
        ``key``; False, and the judge closed, where it cannot be kept (windows off, closing, or a
        judge started by another thread, which dies with that thread). ``live``: JudgeProcess.park."""
        with self._cond:
            if self.window is None or self._closed or judge.parent_thread is not self._starter or not key:
                keep = False
            else:
                judge.park(key, self.window.idle_s, live)
                parked = self._parked.setdefault(judge.device, deque())
                parked.append(judge)
                while len(parked) > self.max_parked:
                    parked.popleft().close()
                keep = True
        if not keep:
            judge.close()
        return keep

    def take(self, device: str, key: str = "") -> JudgeProcess:
        """A judge for ``device``, owned by the caller from now on: one parked for ``key`` when
        there is one (its task's set-up already made), else a standby or a fresh one."""
        with self._cond:
            parked = self._parked.get(device)
            while key and parked:
                match = next((j for j in parked if j.window_key == key), None)
                if match is None:
                    break
                parked.remove(match)
                if match.usable():
                    self.taken_window += 1
                    match.window_key = ""
                    return match
                match.close()
            judge = None
            ready = self._ready.get(device) if not self._closed else None
            while ready:
                candidate = ready.popleft()
                if candidate.usable():
                    judge = candidate
                    break
                candidate.close()
            if ready is not None:
                self._wanted = True  # a replacement, started by the starter thread
                self._cond.notify_all()
            if judge is not None:
                self.taken_warm += 1
                return judge
            self.taken_cold += 1
            if self.window is not None and not self._closed and self._starter.is_alive():
                # Started by this object's thread, so it can be parked after its evaluation.
                self._cold_wanted[device] = self._cold_wanted.get(device, 0) + 1
                self._cond.notify_all()
                if self._cond.wait_for(lambda: bool(self._cold.get(device)) or self._closed, COLD_START_WAIT_S):
                    cold = self._cold.get(device)
                    if cold:
                        return cold.popleft()
        return JudgeProcess(device)  # the caller's thread outlives its use of this judge

    def wait_ready(self, device: str, timeout_s: float, cancelled: Any = lambda: False) -> bool:
        """Wait until every standby of ``device`` has started up (its workers and device context
        ready) or died, and none is still to be started; False after ``timeout_s`` or when
        ``cancelled()``. An evaluation calls this before its timed rounds: a standby's start-up
        competes with them for CPU (and, on a GPU, context creation), so it happens before them."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._cond:
                ready = self._ready.get(device)
                if ready is None or self._closed:
                    return True
                parked = list(self._parked.get(device, ()))
                for judge in [*ready, *parked]:
                    if not judge.ready:
                        judge._drain_reports()
                settled = not self._wanted and len(ready) >= self.depth[device] and all(
                    j.ready or j.proc.poll() is not None for j in [*ready, *parked])
            if settled:
                return True
            if cancelled() or time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    def stats(self) -> dict[str, int]:
        with self._cond:
            parked = sum(len(q) for q in self._parked.values())
        return {"warm": self.taken_warm, "cold": self.taken_cold, "standing_by": self.standby_count(),
                "window": self.taken_window, "parked": parked}

    def standby_count(self) -> int:
        with self._cond:
            return sum(len(q) for q in self._ready.values())

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            for ready in [*self._ready.values(), *self._parked.values(), *self._cold.values()]:
                while ready:
                    ready.popleft().close()
        if self._starter is not threading.current_thread():
            self._starter.join(timeout=10)
