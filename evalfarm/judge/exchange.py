"""One exchange with a worker: its process continued only for its own call, every wait bounded.

The rule. A worker's process group is stopped (SIGSTOP) whenever its own call is not under way
(``stop``/``resume``): the candidate's so it cannot compute ahead, or compete with the reference,
while it is not timed; the reference's too, so the protocol is the same for both. An exchange
(``Link.exchange``) is: "prepare" (the worker's own preparation: poisoning free memory, the L2 reset,
synchronisation; answered "prepared" within PREPARE_TIMEOUT_S), the worker stopped while its inputs
are written, then "go" and its reply within the call's bound on the judge's own clock (the time from
go to reply is the judge's, never the worker's). Every receive is bounded; what a missing or bad
message means is evalfarm.judge.blame's.

Preparation ahead (``PREPARE_AHEAD_ENV``, on unless "0"): each worker prepares its next call right
after replying for the last one, and the judge stops it only once it says it is prepared; a lone
call then needs no "prepare" exchange of its own, and its round goes with "go" (on a GPU, the judge
itself waits for a quiet GPU before it writes a reference call's inputs, evalfarm.judge.quiet).
Shorter still, each the operator's switch (``Switches``): the "go" queued before the worker
continues (GO_FIRST_ENV), the judge spinning briefly for replies on a GPU (JUDGE_SPIN_ENV), a lone
round's inputs written into both (prepared, stopped) workers at once (ROUND_WRITE_ENV), and no
poisoning in the reference worker (REFERENCE_POISON_ENV).
"""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import time
from typing import Any

import torch

from evalfarm.judge import framing, reference_memo
from evalfarm.judge.arena import Arena
from evalfarm.judge.audit_overlap import AUDIT_OVERLAP_ENV, audit_overlap_wanted
from evalfarm.judge.blame import Verdicted, blame_busy_gpu, receive_failure, worker_error_verdict
from evalfarm.judge.draw_ahead import DRAW_AHEAD_ENV, draw_ahead_wanted
from evalfarm.judge.placement import PLACE_CALLS_ENV, place_calls_wanted
from evalfarm.judge.quiet import QuietProbe
from evalfarm.judge.roles import REFERENCE
from evalfarm.judge.round_trace import RoundTrace
from evalfarm.judge.rounds import RoundPlan, int_field, write_inputs
from evalfarm.judge.switch_env import mebibytes
from evalfarm.judge.worker_processes import WorkerHandle

# Preparation ahead: a worker prepares its next call (poisoning, L2 reset, synchronisation) right
# after replying for the last one, and the judge sends a lone call's round with "go", with no
# "prepare" round trip of its own (two stop/continue signals, and on a GPU a switch of the device to
# the worker's context and back, fewer per call). "0" in the judge's environment turns it off.
PREPARE_AHEAD_ENV = "EVALFARM_PREPARE_AHEAD"
# Ways to shorten an exchange further, each the operator's switch in the judge's environment
# (docs/benchmarks.md, "Shortening the exchange"):
# * GO_FIRST_ENV (on unless "0"): the judge queues a "go" before it continues the stopped worker,
#   so the worker's read, restarted by the SIGCONT, finds it at once (one wake-up instead of two);
# * JUDGE_SPIN_ENV (microseconds; DEFAULT_JUDGE_SPIN_US unless set, "0" none): the judge polls for a
#   worker's reply without sleeping for up to this long before it blocks (on a GPU only; it keeps
#   one host core busy meanwhile);
# * ROUND_WRITE_ENV (on unless "0"): where both workers prepared ahead, a lone round's inputs are
#   written into both workers' slots at once, in its first exchange (one switch of the device to
#   the judge's context and one synchronisation fewer per round);
# * REFERENCE_POISON_ENV (off unless "1"): the reference worker, which runs no candidate code, skips
#   the free-memory poisoning in its preparation (the candidate's is the operator's POISON_ENV, as
#   before); "1" poisons there too.
# * PLACE_CALLS_ENV (evalfarm.judge.placement): timed calls' memory placed anew per call;
# * DRAW_AHEAD_ENV (evalfarm.judge.draw_ahead; unset: on a CPU only): the next correctness block's
#   inputs drawn while the workers run this one;
# * AUDIT_OVERLAP_ENV (evalfarm.judge.audit_overlap; off unless "1"): a correctness block's
#   audits run while the reference worker runs the next block;
# * ARENA_BUDGET_ENV (MiB, a positive integer; unset: evalfarm.judge.setup.arena_budget's default):
#   the device memory of an evaluation's input/output arenas, so how many rounds a batch holds.
# * REFERENCE_MEMO_ENV (evalfarm.judge.reference_memo; MiB, unset: its default, "0" off): a task
#   window's reference outputs of the correctness blocks, kept for its later candidates.
GO_FIRST_ENV = "EVALFARM_GO_FIRST"
JUDGE_SPIN_ENV = "EVALFARM_JUDGE_SPIN_US"
ROUND_WRITE_ENV = "EVALFARM_ROUND_WRITE"
REFERENCE_POISON_ENV = "EVALFARM_REFERENCE_POISON"
ARENA_BUDGET_ENV = "EVALFARM_ARENA_BUDGET_MB"
DEFAULT_JUDGE_SPIN_US = 2000
# A worker's preparation for a call (poisoning free memory, the L2 flush, and on the reference's
# side waiting for a quiet GPU) is bounded by this.
PREPARE_TIMEOUT_S = 60.0
# A reference call that had to wait longer than this for a quiet GPU is noted in the evidence.
QUIET_NOTE_S = 2e-3


def judge_spin_s(setting: str, device_type: str) -> float:
    """The judge's spin before a blocking receive (JUDGE_SPIN_ENV), in seconds: the setting in
    microseconds, or unset: DEFAULT_JUDGE_SPIN_US. On a GPU only: on a CPU the spinning judge would
    take a core from the calls it times (an identical copy scored 0.35-0.78 that way on a 2-core
    machine). A bad setting is an error the operator sees at once."""
    if not setting.strip():
        setting = str(DEFAULT_JUDGE_SPIN_US)
    try:
        us = float(setting)
    except ValueError:
        raise ValueError(f"{JUDGE_SPIN_ENV}={setting!r}: expected microseconds, e.g. 1000") from None
    if not 0 <= us <= 1e6 or not math.isfinite(us):
        raise ValueError(f"{JUDGE_SPIN_ENV}={setting!r}: expected 0 to 1000000 microseconds")
    return us / 1e6 if device_type == "cuda" else 0.0


def arena_budget_bytes(setting: str) -> int:
    """ARENA_BUDGET_ENV in bytes: 0 where unset (the default budget); a setting that is not a
    positive number of MiB is an error the operator sees at once."""
    return mebibytes(ARENA_BUDGET_ENV, setting, 0)


@dataclasses.dataclass(frozen=True)
class Switches:
    """The operator's exchange switches, read from the judge's environment."""

    prepare_ahead: bool
    go_first: bool
    round_write: bool
    reference_poison: bool
    spin_s: float
    place_calls: bool = False  # evalfarm.judge.placement
    arena_budget_bytes: int = 0  # ARENA_BUDGET_ENV; 0: evalfarm.judge.setup.arena_budget's default
    draw_ahead: bool = False  # evalfarm.judge.draw_ahead
    audit_overlap: bool = False  # evalfarm.judge.audit_overlap
    reference_memo_bytes: int = 0  # evalfarm.judge.reference_memo's budget; 0: off

    @classmethod
    def from_env(cls, device_type: str) -> Switches:
        """From ``os.environ``; a bad JUDGE_SPIN_ENV, PLACE_CALLS_ENV, ARENA_BUDGET_ENV, DRAW_AHEAD_ENV,
        AUDIT_OVERLAP_ENV or REFERENCE_MEMO_ENV raises ValueError."""
        prepare_ahead = os.environ.get(PREPARE_AHEAD_ENV, "1") != "0"
        return cls(prepare_ahead=prepare_ahead,
                   go_first=os.environ.get(GO_FIRST_ENV, "1") != "0",
                   round_write=prepare_ahead and os.environ.get(ROUND_WRITE_ENV, "1") != "0",
                   reference_poison=os.environ.get(REFERENCE_POISON_ENV, "0") == "1",
                   spin_s=judge_spin_s(os.environ.get(JUDGE_SPIN_ENV, ""), device_type),
                   place_calls=place_calls_wanted(os.environ.get(PLACE_CALLS_ENV, ""), device_type),
                   arena_budget_bytes=arena_budget_bytes(os.environ.get(ARENA_BUDGET_ENV, "")),
                   draw_ahead=draw_ahead_wanted(os.environ.get(DRAW_AHEAD_ENV, ""), device_type),
                   audit_overlap=audit_overlap_wanted(os.environ.get(AUDIT_OVERLAP_ENV, ""), device_type),
                   reference_memo_bytes=reference_memo.budget_bytes(os.environ.get(reference_memo.REFERENCE_MEMO_ENV, "")))


def raise_worker_error(msg: dict[str, Any], worker: WorkerHandle) -> None:
    raise Verdicted(*worker_error_verdict(msg, worker.role))


class Link:
    """The judge's side of its two workers: which are stopped, which prepared their next call
    ahead, and one exchange at a time with either. ``phases``: the evaluation's round phases
    (rounds_prepare, rounds_poison, rounds_quiet, rounds_write, rounds_go), added to here."""

    def __init__(self, ref: WorkerHandle, cand: WorkerHandle, device: torch.device, switches: Switches,
                 phases: dict[str, float], trace: RoundTrace | None) -> None:
        self.ref, self.cand = ref, cand
        self.device = device
        self.switches = switches
        self.spin_s = switches.spin_s
        self.phases = phases
        self.trace = trace
        self.stopped: set[str] = set()
        self.ready: set[str] = set()  # workers that prepared their next call after their last reply
        # Set by the set-up: the workers' input/output arenas (where an exchange writes a round's
        # inputs), and on a GPU the judge's own quiet-GPU probe (judge_waits_quiet).
        self.arenas: dict[tuple[str, str], Arena] = {}
        self.quiet_probe: QuietProbe | None = None
        self.quiet_waits: list[float] = []  # reference quiet-GPU waits over QUIET_NOTE_S, for the evidence

    def worker(self, role: str) -> WorkerHandle:
        return self.ref if role == REFERENCE else self.cand

    # --- a worker's process runs only while its own call is under way ------------------
    # Stopping the candidate keeps it from computing ahead, or competing with the reference, while
    # it is not being timed; stopping the reference too keeps the protocol the same for both (an
    # idle worker's spinning thread pool would otherwise take cores from the other's call on CPU).
    def stop(self, role: str) -> None:
        worker = self.worker(role)
        if role not in self.stopped and worker.signal_group(signal.SIGSTOP):
            self.stopped.add(role)

    def resume(self, role: str) -> None:
        if role in self.stopped:
            worker = self.worker(role)
            worker.signal_group(signal.SIGCONT)
            self.stopped.discard(role)

    def resume_all(self) -> None:
        for role in list(self.stopped):
            self.resume(role)

    def recv(self, worker: WorkerHandle, timeout: float, what: str, spin: bool = False) -> dict[str, Any]:
        """One message from ``worker`` within ``timeout`` s (``spin``: the judge's spin first, JUDGE_SPIN_ENV)."""
        try:
            return framing.recv_json(worker.conn, timeout, self.spin_s if spin else 0.0)
        except (TimeoutError, framing.PeerClosed, framing.ProtocolError) as err:
            raise receive_failure(worker, err, what, timeout, self.device.type) from None

    def exchange(self, role: str, prepare: dict[str, Any], plans: list[RoundPlan], what: str,
                  limit: float, progress: list[tuple[int, str]] | None = None,
                  preparing: str = "", write_roles: tuple[str, ...] | None = None) -> tuple[dict[str, Any], int, int]:
        """One exchange with a worker: ``prepare`` (where it asks for one, a warm call first,
        answered "warmed" within ``limit`` s; then its own preparation, answered "prepared"), the
        worker stopped while the inputs of ``plans`` are written, then "go" and its reply within
        ``limit`` s. ``progress`` (a block's rounds but its last, each with what to call it): a
        "called" message is expected for each, in order, each within ``limit`` s of the one
        before, so a call that hangs is ended at the per-call bound; anything else there is
        taken as the reply. ``write_roles``: whose inputs of ``plans`` to write while it is stopped
        (default: this worker's; ROUND_WRITE_ENV: the other's too, which must have prepared ahead,
        or none, written in the exchange before, which needs this one prepared ahead). Returns the
        reply, the judge's nanoseconds from go to reply and from prepare to "warmed" (0 without a
        warm call); the worker is stopped again however the exchange ends."""
        worker = self.worker(role)
        phases = self.phases
        stamps: dict[str, float] = {}  # the judge's clock at each step, for the round trace
        prepared: dict[str, Any] = {}
        ahead_msg: dict[str, Any] = {}
        # Prepared after its last reply (and stopped since): a lone call's round goes with "go".
        ahead = role in self.ready and prepare["op"] == "prepare" and not prepare.get("warm")
        write_roles = (role,) if write_roles is None else write_roles
        # Inputs are only ever written into a worker that has finished its preparation (and is stopped).
        if not ahead and write_roles != (role,):
            raise RuntimeError(f"inputs written before {role}'s own preparation")
        if any(other != role and other not in self.ready for other in write_roles):
            raise RuntimeError(f"inputs written into a worker not prepared ahead: {write_roles}")
        self.ready.discard(role)
        warm_ns = 0
        try:
            t0 = stamps["start"] = time.perf_counter()
            if not ahead:
                self.resume(role)
                framing.send_json(worker.conn, prepare)
                if prepare.get("warm"):
                    msg = self.recv(worker, limit, f"the untimed warm call before {preparing or what}")
                    stamps["warmed"] = time.perf_counter()
                    warm_ns = int((stamps["warmed"] - t0) * 1e9)
                    if msg.get("op") != "warmed":
                        raise_worker_error(msg, worker)
                prepared = self.recv(worker, PREPARE_TIMEOUT_S, f"preparing {preparing or what}")
                stamps["prepared"] = time.perf_counter()
                self.stop(role)  # stopped while its inputs are written
                self.note_prepared(prepared, worker)
            t1 = stamps["stopped"] = time.perf_counter()
            phases["rounds_prepare"] += t1 - t0
            if ahead and role == REFERENCE and self.device.type == "cuda":
                self.judge_waits_quiet()
                stamps["quiet"] = t1 = time.perf_counter()
            for writing in write_roles:
                for plan in plans:
                    write_inputs(self.arenas, writing, plan)
            if self.device.type == "cuda" and write_roles:
                # The judge's own stream: the writes are done before the go (comparisons the judge
                # runs meanwhile on a stream of their own, evalfarm.judge.audit_overlap, need not be).
                torch.cuda.current_stream(self.device).synchronize()
            stamps["written"] = time.perf_counter()
            go = {**prepare, "op": "go"} if ahead else {"op": "go"}
            if self.switches.go_first:  # queued while it is stopped: its restarted read finds it (GO_FIRST_ENV)
                # The go step starts here, so its SIGCONT is inside it (the call may start before
                # the signal's system call returns): "resumed" marks where the write step ends.
                stamps["resumed"] = time.perf_counter()
                sent = time.perf_counter_ns()
                framing.send_json(worker.conn, go)
                self.resume(role)
            else:
                self.resume(role)
                stamps["resumed"] = time.perf_counter()
                sent = time.perf_counter_ns()
                framing.send_json(worker.conn, go)
            phases["rounds_write"] += stamps["resumed"] - t1
            res: dict[str, Any] | None = None
            for r, call_what in progress or ():
                msg = self.recv(worker, limit, call_what, spin=True)
                if msg.get("op") != "called" or int_field(msg, "r") != r:
                    res = msg  # an error report ends the block; any other message is a bad reply
                    break
            if res is None:
                res = self.recv(worker, limit, what, spin=True)
            go_ns = time.perf_counter_ns() - sent
            stamps["replied"] = time.perf_counter()
            phases["rounds_go"] += go_ns / 1e9  # a block's later calls' preparations are in here
            if self.switches.prepare_ahead and res.get("op") in ("round", "block"):
                t2 = time.perf_counter()
                ahead_msg = self.recv(worker, PREPARE_TIMEOUT_S, f"preparing the call after {what}", spin=True)
                stamps["ahead"] = time.perf_counter()
                phases["rounds_prepare"] += stamps["ahead"] - t2
                self.note_prepared(ahead_msg, worker)
                self.ready.add(role)
        finally:
            self.stop(role)
        if self.trace is not None:
            stamps["final_stop"] = time.perf_counter()
            self.trace.exchange(role, [plan.r for plan in plans], stamps, prepared, res, ahead_msg, write_roles)
        return res, go_ns, warm_ns

    def judge_waits_quiet(self) -> None:
        """Before a reference call prepared ahead: the quiet-GPU wait the reference worker makes in its
        own preparation, made by the judge instead (evalfarm.judge.quiet), with the candidate's process
        stopped, from the judge's context, which writes the reference's inputs next anyway."""
        assert self.quiet_probe is not None  # made in the set-up, before any candidate code ran
        quiet, waited = self.quiet_probe.wait()
        if not quiet:
            raise blame_busy_gpu(self, waited)
        self.note_quiet_wait(waited)

    def note_prepared(self, msg: dict[str, Any], worker: WorkerHandle) -> None:
        """A worker's answer to prepare (or prepare_block): go on only when it is ready."""
        if msg.get("op") == "busy":
            raise blame_busy_gpu(self, float(msg.get("waited_s", 0)))
        if msg.get("op") != "prepared":
            raise_worker_error(msg, worker)
        # The worker's own report: a diagnostic, never a score.
        if isinstance(msg.get("poison_s"), float) and 0.0 <= msg["poison_s"] < PREPARE_TIMEOUT_S:
            self.phases["rounds_poison"] += msg["poison_s"]
        if isinstance(msg.get("quiet_wait_s"), float):
            self.note_quiet_wait(msg["quiet_wait_s"])

    def note_quiet_wait(self, waited: float) -> None:
        """A quiet-GPU wait before a reference call (the reference worker's or the judge's): its time
        into the round phases, and a wait over QUIET_NOTE_S kept for the evidence's note."""
        if 0.0 <= waited < PREPARE_TIMEOUT_S:
            self.phases["rounds_quiet"] += waited
        if waited > QUIET_NOTE_S:
            self.quiet_waits.append(waited)
