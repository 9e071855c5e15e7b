"""Timed blocks: the score's calls queued back to back, as the device runs a model's calls.

The rule. After correctness, the timed rounds run a batch at a time as a *pair of blocks*, one per
worker, in an order drawn per pair; both blocks take the batch's rounds in the same order, with the
same fresh inputs. In a block the worker queues all of its calls at once, each behind a gate in its
staging area (evalfarm.judge.staging), and the judge releases them one at a time
(``release_calls``): it waits until the call is queued (at most ``QUEUE_GRACE_S``, for a forward
that itself waits for the device), writes that call's inputs into the staging area, opens the gate
and waits, on its own clock and within the per-call bound, for the call's completion word. Per call
the device then runs, with no host in between: the inputs copied in, the L2 flush, the call between
two CUDA events (its time), the outputs copied out, the completion word. On a CPU the worker's
thread waits at each gate and the host clock times the call.

Why the number is the device's: every kernel of a call is queued before the call may start, so its
time has no launch latency and no idle device before it, which an isolated call after an exchange
pays (+60-80 us on a 30 us kernel on an H100: docs/benchmarks.md); and the L2 is flushed and the
inputs are fresh for every call, as ``triton.testing.do_bench`` and nvbench do it.

Why it keeps what made lone calls honest:

* fresh inputs per call, seen by no earlier call: a call's inputs are written only after the
  previous call's completion word, so nothing can read ahead (a block's inputs written all at once,
  as correctness blocks have them, would let a candidate batch later calls into earlier ones);
* audits: a random share of each block's calls is checked against the reference's outputs for the
  same inputs, outputs copied out on the stream right after the call, so work deferred past the
  call leaves wrong outputs behind;
* the judge's clock: for every call it knows when it opened the gate and when it saw the call
  done; a call reported longer than that window is a tampered clock (``clock_behind_events``), and
  what the window holds beyond the reported call is compared with the reference's and charged where
  it is more (``exchange_charge_ns``); so is each block's tail (its reply after the last call, spread
  over its calls: ``tail_charge_ns``), so forged completion words or event times buy nothing the
  judge's clock does not see;
* the candidate's process is stopped while the reference's block runs, and on a GPU the judge waits
  for a quiet device before each reference block (work left running is the candidate's, blamed as
  before);
* the first ``WARMUP_CALLS`` calls of each block are checked but not timed (the device has just
  switched from the other worker's context).

The judge's side of a pair (``TimedPair``): each worker's block runs the batch's rounds in order with
the same inputs, the two blocks in the order drawn for the batch, the other worker stopped meanwhile.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from evalfarm import sandbox
from evalfarm.judge import framing
from evalfarm.judge.blame import Verdicted, check_contained
from evalfarm.judge.bounds import Bounds
from evalfarm.judge.framing import ProtocolError
from evalfarm.judge.lone_calls import CallFailure
from evalfarm.judge.roles import CANDIDATE, REFERENCE
from evalfarm.judge.rounds import RoundPlan, block_messages, block_results
from evalfarm.judge.staging import JudgeStaging, StagingLayout, wait_for
from evalfarm.verdict import Verdict

if TYPE_CHECKING:
    from evalfarm.judge.exchange import Link

# How long the judge waits for a call to be queued behind its gate before it opens the gate
# anyway: a forward that waits for the device itself (a .item(), a host copy) cannot be queued
# before its gate opens; its call then includes what the host does, as it would in a model.
QUEUE_GRACE_S = 5e-3
# Calls at the start of each block that are checked but not timed.
WARMUP_CALLS = 1
# Timed blocks only where a batch holds at least this many rounds (the arenas' budget decides):
# fewer would leave too few timed calls per block beside its warm-up call.
MIN_BLOCK_CALLS = 4
# Timed blocks stage one round's inputs in host memory; larger inputs keep the lone-call protocol
# (their calls are long enough that the exchange before one is a small part of it).
STAGING_MAX_BYTES = 256 << 20

# Added to the isolation notes when the timed rounds run in timed blocks (evalfarm.judge.timed_blocks).
TIMED_BLOCK_NOTE = ("timed rounds run in blocks: each worker's calls queued back to back, each call's fresh inputs "
                    "released by the judge only after the previous call finished; a random share of every block's "
                    "calls checked; each call's reported time compared with the judge's own clock")


class WordSignals:
    """A GPU worker's signals: the gate and completion words on the staging page, which its stream
    reads and writes; the judge spins on the completion word, looking at the worker's socket too."""

    def __init__(self, staging: JudgeStaging, poll: Callable[[], bool], spin_s: float) -> None:
        self.staging, self.poll, self.spin_s = staging, poll, spin_s

    def queued(self, seq: int, deadline: float) -> str:
        return wait_for(lambda: self.staging.queued() >= seq, deadline, self.poll)

    def opened(self, seq: int) -> None:
        pass

    def await_done(self, seq: int, deadline: float) -> str:
        return wait_for(lambda: self.staging.done() >= seq, deadline, self.poll, self.spin_s)


class MessageSignals:
    """A CPU worker's signals: an "open" message after the gate word, a "done" message back (the
    worker's thread blocks on the judge's message, and the judge on the worker's). Any other message
    (an error report) ends the wait and is kept in ``message``."""

    def __init__(self, send: Callable[[dict[str, Any]], None], recv: Callable[[float], dict[str, Any]]) -> None:
        self.send, self.recv = send, recv
        self.message: dict[str, Any] | None = None

    def queued(self, seq: int, deadline: float) -> str:
        return "ok"  # its thread reaches the gate once it has sent the last call's "done"

    def opened(self, seq: int) -> None:
        self.send({"op": "open", "seq": seq})

    def await_done(self, seq: int, deadline: float) -> str:
        try:
            msg = self.recv(max(0.0, deadline - time.perf_counter()))
        except TimeoutError:
            return "timeout"
        except (OSError, EOFError, ValueError, ProtocolError):  # gone or garbled: the judge's own read says how
            return "message"
        if msg.get("op") == "done" and msg.get("seq") == seq:
            return "ok"
        self.message = msg
        return "message"


@dataclasses.dataclass
class Released:
    """How a block's release went on the judge's clock: per released call, when its gate opened and
    when its completion was seen (perf_counter ns); ``outcome`` is "ok", "timeout" (call ``stuck``
    did not finish within its bound) or "message" (the worker sent one mid-block: an error report)."""

    opened_ns: list[int]
    done_ns: list[int]
    outcome: str = "ok"
    stuck: int = -1  # index of the call the judge was waiting for when it stopped


def release_calls(staging: JudgeStaging, layout: StagingLayout, inputs: list[list[Any]], seq0: int,
                  bound_s: Callable[[int], float], signals: WordSignals | MessageSignals,
                  clock_ns: Callable[[], int] = time.perf_counter_ns) -> Released:
    """Release a block's calls one at a time (the rule above): call k (0-based) has sequence number
    ``seq0 + k + 1`` and the host inputs ``inputs[k]``; ``bound_s(k)`` is how long it may take from
    its gate opening to its completion. ``signals``: how the worker is told and tells."""
    out = Released([], [])
    for k, call_inputs in enumerate(inputs):
        seq = seq0 + k + 1
        if signals.queued(seq, time.perf_counter() + QUEUE_GRACE_S) == "message":
            out.outcome, out.stuck = "message", k
            return out
        staging.write_inputs(layout, call_inputs)
        opened = clock_ns()
        staging.open(seq)
        signals.opened(seq)
        outcome = signals.await_done(seq, time.perf_counter() + bound_s(k))
        done = clock_ns()
        if outcome != "ok":
            out.outcome, out.stuck = outcome, k
            return out
        out.opened_ns.append(opened)
        out.done_ns.append(done)
    return out


def judge_windows_ns(released: Released) -> list[int]:
    """Each call's time on the judge's clock: its gate opened to its completion seen."""
    return [d - o for o, d in zip(released.opened_ns, released.done_ns, strict=True)]


def tail_share_ns(released: Released, reply_ns: int) -> int:
    """The block's tail (its last completion seen to the worker's reply: the worker's final
    synchronisation and report) spread evenly over its calls. Work a worker left running after its
    last call's completion word shows here; it is compared with the reference's (``tail_charge_ns``)."""
    n = len(released.done_ns)
    return max(0, reply_ns - released.done_ns[-1]) // n if n else 0


# Noise allowed between the two workers' tail shares before the excess is charged: this much plus
# this share of the reference's median (a tail is one host synchronisation and a message, whose
# time varies more than a call's window does).
TAIL_SLACK_NS = 50_000
TAIL_SLACK_FRACTION = 0.5


def tail_charge_ns(ref_shares: list[int], cand_shares: list[int]) -> int:
    """What to add to every candidate call for its blocks' longer tails: the median of the paired
    differences of the tail shares beyond the slack, in full; below it nothing."""
    if not ref_shares or len(ref_shares) != len(cand_shares):
        return 0
    excess = statistics.median([c - r for r, c in zip(ref_shares, cand_shares, strict=True)])
    slack = TAIL_SLACK_NS + TAIL_SLACK_FRACTION * statistics.median(ref_shares)
    return int(excess) if excess > slack else 0


def host_copies(plans: list[RoundPlan], device: torch.device) -> list[list[Any]]:
    """The judge's host copies of a batch's inputs, which it writes into each staging area. From a
    GPU they are copied into page-locked memory, all with one synchronisation, before either block
    starts (the device is idle then): a copy into pageable memory runs at a few GB/s (about 100 ms
    for 256 MiB on an H200, nine tenths of L1/1's timing phase at its default size), a page-locked
    one at the bus's speed. The page-locked buffers come from PyTorch's host allocator, which keeps
    them for the next batch: at most one batch's inputs, as the arenas hold on the device."""
    if device.type != "cuda":
        return [[v.to("cpu") if isinstance(v, torch.Tensor) else v for v in plan.inputs] for plan in plans]
    out: list[list[Any]] = []
    for plan in plans:
        row: list[Any] = []
        for v in plan.inputs:
            if isinstance(v, torch.Tensor) and v.device.type == "cuda":
                host = torch.empty(v.shape, dtype=v.dtype, pin_memory=True)
                host.copy_(v, non_blocking=True)
                row.append(host)
            else:
                row.append(v.to("cpu") if isinstance(v, torch.Tensor) else v)
        out.append(row)
    torch.cuda.synchronize(device)
    return out


class TimedPair:
    """The judge's side of the timed blocks: each worker's staging area, its layout, and the last
    sequence number used (both workers' calls number on from it)."""

    def __init__(self, staging: dict[str, JudgeStaging], layout: StagingLayout) -> None:
        self.staging = staging
        self.layout = layout
        self.seq = 0

    def run_pair(self, link: Link, bounds: Bounds, plans: list[RoundPlan], fail: CallFailure) -> None:
        """A batch of timed rounds as a pair of timed blocks (evalfarm.judge.timed_blocks): each
        worker's block runs the batch's rounds in order with the same inputs, the two blocks in the
        order drawn for the batch, the other worker stopped meanwhile; on a GPU the judge first waits
        for a quiet device before the reference's block (work left running is the candidate's)."""
        first = plans[0].first
        for plan in plans:
            plan.first = first
        staged = host_copies(plans, link.device)
        results: dict[str, list[dict[str, Any]]] = {}
        for role in ((REFERENCE, CANDIDATE) if first == REFERENCE else (CANDIDATE, REFERENCE)):
            if role == REFERENCE and link.device.type == "cuda":
                link.judge_waits_quiet()
            t_step = time.monotonic()
            results[role] = self.run_block(link, role, plans, staged, bounds.wait_bound(role), fail)
            link.phases["rounds_exchange"] += time.monotonic() - t_step
            link.phases["rounds_calls"] += sum(res["t"] for res in results[role]) / 1e9
        for k, plan in enumerate(plans):
            plan.times = {role: results[role][k] for role in (REFERENCE, CANDIDATE)}
            t_cand = plan.times[CANDIDATE]["t"]
            if t_cand / 1e9 > bounds.call_limit_s():
                raise Verdicted(Verdict.TIMEOUT, f"a call took {t_cand / 1e6:.1f} ms, more than "
                                f"{bounds.timeout_factor:g}x the reference's {bounds.t_ref_est * 1e3:.3f} ms")
            bounds.note_reference_call(plan.times[REFERENCE]["t"])

    def run_block(self, link: Link, role: str, plans: list[RoundPlan], staged: list[list[Any]], bound: float,
                  fail: CallFailure) -> list[dict[str, Any]]:
        """One worker's timed block: the calls sent, released one at a time through its staging area
        (``release_calls``), then its reply. Returns the per-call results, checked against the
        rounds sent, each with ``j``: its time on the judge's clock (``judge_windows_ns``)."""
        worker = link.worker(role)
        seq0, self.seq = self.seq, self.seq + len(plans)
        rounds = [plan.r for plan in plans]
        message = {"op": "timed_block", "seq0": seq0, "layout": self.layout.to_wire(),
                   "rounds": block_messages(plans, role)}
        link.ready.discard(role)  # its next lone call (if any) prepares again
        try:
            link.resume(role)
            sent = time.perf_counter()
            framing.send_json(worker.conn, message)
            signals: WordSignals | MessageSignals = (
                WordSignals(self.staging[role], lambda: worker.conn.poll(0), link.spin_s or 50e-6)
                if link.device.type == "cuda" else
                MessageSignals(lambda m: framing.send_json(worker.conn, m), lambda t: framing.recv_json(worker.conn, t)))
            released = release_calls(self.staging[role], self.layout, staged, seq0, lambda k: bound, signals)
            if released.outcome == "timeout":
                r = rounds[released.stuck]
                sandbox.kill_group(worker.proc)
                if role == REFERENCE:
                    raise Verdicted(Verdict.INFRA_ERROR, f"the reference worker did not finish round {r} (a timed "
                                    f"block's call) within {bound:.3g} s")
                raise Verdicted(Verdict.TIMEOUT, f"the candidate did not finish round {r} (call "
                                f"{released.stuck + 1} of a timed block of {len(plans)}) within {bound:.3g} s")
            reply = (signals.message if isinstance(signals, MessageSignals) and signals.message is not None
                     else link.recv(worker, bound, f"round {rounds[-1]} (the end of a timed block)", spin=True))
            reply_ns = time.perf_counter_ns()
            link.phases["rounds_go"] += time.perf_counter() - sent  # its calls, the judge's writes between them
        finally:
            link.stop(role)
        if reply.get("op") != "block" or released.outcome != "ok":
            fail(role, reply, next((p for p in plans if p.r == reply.get("round")), None))
        results = block_results(reply, rounds)
        tail = tail_share_ns(released, reply_ns)
        for res, j in zip(results, judge_windows_ns(released), strict=True):
            res["j"], res["w"], res["tail"] = j, 0, tail
        if link.trace is not None:
            link.trace.timed_block(role, results)
        if role == CANDIDATE:
            check_contained(worker)
        return results
