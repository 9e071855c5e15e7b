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
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from typing import Any

from evalfarm.judge.staging import JudgeStaging, StagingLayout, wait_for
from evalfarm.judge.wire import ProtocolError

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
