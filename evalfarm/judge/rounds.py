"""Rounds: what one round is, how a batch of them is planned, and what a worker reports for one.

The rule. Round r's inputs are the input source's r-th draw, the same for both workers; the judge
keeps a pristine copy (``RoundPlan.inputs``) and writes it into each worker's input slots only when
that worker's call is about to run (``write_inputs``). A batch is as many rounds as the arenas hold
(``RoundPlanner``), never straddling an edge of the correctness blocks or, with timed blocks, the end
of correctness; each round's output slots are poisoned (NaN, or 0x5A) so a slot never written cannot
pass, whose call runs first is drawn per round, and whether it is audited comes from the judge's
secret schedule (evalfarm.judge.audits). A worker's result for a round must name that round, with a
positive call time and a non-negative pre-call time (``check_round_result``, ``block_results``);
anything else is a protocol violation.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import torch

from evalfarm.judge.arena import ALIGN, Arena
from evalfarm.judge.audits import AuditSchedule
from evalfarm.judge.blame import Verdicted
from evalfarm.judge.draw_ahead import DrawAhead
from evalfarm.judge.inputs import InputSource
from evalfarm.judge.placement import input_offset
from evalfarm.judge.roles import CANDIDATE, REFERENCE
from evalfarm.judge.round_trace import RoundTrace
from evalfarm.verdict import Verdict


@dataclasses.dataclass
class Call:
    """One worker's part of a round: where its inputs and outputs live, and the message that starts it."""

    in_slots: list[Any]  # Slot or None (a non-tensor argument)
    out_slots: list[Any]
    prepare: dict[str, Any]


@dataclasses.dataclass
class RoundPlan:
    r: int
    first: str  # REFERENCE or CANDIDATE: whose call runs first this round
    audited: bool
    inputs: list[Any]  # the judge's own copies (pristine)
    calls: dict[str, Call]
    times: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    warm_call: bool = False  # both workers call their model once, untimed, on earlier inputs first
    block_call: int | None = None  # its place in a timed block (evalfarm.judge.timed_blocks); None: not in one
    # The reference's outputs of this round kept from an earlier candidate of the task window
    # (evalfarm.judge.reference_memo), as RoundAudit.outputs reads them; None: the reference runs it.
    kept_reference: Any = None


@dataclasses.dataclass
class RoundPlanner:
    """What planning a batch needs, fixed by the set-up."""

    arenas: dict[tuple[str, str], Arena]  # (role, "in" | "out")
    source: InputSource
    out_struct: list[tuple[tuple[int, ...], torch.dtype]]
    rng: random.Random  # the judge's secret generator
    device: torch.device
    rounds_per_batch: int
    block_rounds: range  # the correctness blocks' rounds (evalfarm.judge.correctness)
    num_correctness_inputs: int
    timed: bool  # the timed rounds run in timed blocks
    trace: RoundTrace | None = None
    # Timed batches' input slots start at a random offset below this in each worker's input arena
    # (evalfarm.judge.placement), drawn from ``place_rng``; 0: at the arena's start.
    input_slack: int = 0
    place_rng: random.Random | None = None
    # A timed batch's rounds, at most (its inputs are copied to the judge's host memory first:
    # evalfarm.judge.setup.timed_rounds_per_batch); 0: as many as any batch.
    timed_rounds_per_batch: int = 0
    # The next correctness block's inputs, drawn while the workers run this one (evalfarm.judge.draw_ahead).
    ahead: DrawAhead | None = None
    # Correctness blocks of half a batch each, taking turns between the two halves of every arena,
    # so one block's slots stay as they were while the next runs (evalfarm.judge.audit_overlap).
    pipelined: bool = False
    _half: int = 0

    def _start(self, key: tuple[str, str]) -> int:
        """Where the half this block batch uses begins in arena ``key`` (the input slack, which
        only timed batches use, left out of the halves)."""
        if not self._half:
            return 0
        slack = self.input_slack if key[1] == "in" else 0
        return (self.arenas[key].capacity - slack) // 2 // ALIGN * ALIGN

    def batch_rounds(self, first_round: int) -> range:
        """The rounds of the batch that starts at ``first_round``. A batch never straddles an edge
        of the block rounds: it runs either as one correctness block or call by call (the warm-up
        before it, the timed rounds after it); nor, with timed blocks, the end of correctness (the
        timed rounds after it run as timed blocks)."""
        count = self.rounds_per_batch
        if self.pipelined and first_round in self.block_rounds:
            count //= 2
        n_correct = self.num_correctness_inputs
        edges = sorted({*((self.block_rounds.start, self.block_rounds.stop) if self.block_rounds else ()),
                        *((n_correct,) if self.timed else ())})
        for edge in edges:
            if first_round < edge:
                count = min(count, edge - first_round)
                break
        if self.timed and first_round >= n_correct and self.timed_rounds_per_batch:
            count = min(count, self.timed_rounds_per_batch)
        return range(first_round, first_round + count)

    def draw_next_block(self, first_round: int) -> None:
        """Where the batch at ``first_round`` is a correctness block, start drawing its inputs ahead
        (the caller runs a correctness block meanwhile and joins ``ahead`` after it)."""
        if self.ahead is not None and first_round in self.block_rounds:
            self.ahead.start(self.batch_rounds(first_round))

    def plan(self, first_round: int, audits: AuditSchedule, warm_calls: bool) -> list[RoundPlan]:
        """The next batch from ``first_round``: arenas reset, slots allocated, outputs poisoned.
        ``warm_calls``: the batch's rounds get warm calls where they run one call per exchange
        (evalfarm.judge.lone_calls.warm_call_wanted)."""
        if self.pipelined and first_round in self.block_rounds:
            self._half ^= 1  # the other half from the batch before
        else:
            self._half = 0
        for key, a in self.arenas.items():
            a.reset(self._start(key))
        if self.trace is not None:
            self.trace.sample_clock()
        count = len(self.batch_rounds(first_round))
        n_correct = self.num_correctness_inputs
        plans = []
        # The same for both workers and decided here, by the judge (ScoreConfig.warm_call); only for
        # rounds run one call per exchange (a block's calls follow one another anyway).
        timed_block = self.timed and first_round >= n_correct
        warm_call = not timed_block and warm_calls
        if timed_block and self.input_slack and self.place_rng is not None:
            for role in (REFERENCE, CANDIDATE):
                self.arenas[role, "in"].skip(input_offset(self.place_rng, self.input_slack))
        for k in range(count):
            r = first_round + k
            drawn = self.ahead.take(r) if self.ahead is not None else None
            inputs = [v.contiguous() if isinstance(v, torch.Tensor) else v
                      for v in (drawn if drawn is not None else self.source.inputs(r))]
            audited = audits.audited(r)
            calls = {}
            for role in (REFERENCE, CANDIDATE):
                in_arena, out_arena = self.arenas[role, "in"], self.arenas[role, "out"]
                slots = [in_arena.alloc(tuple(v.shape), v.dtype) if isinstance(v, torch.Tensor) else None
                         for v in inputs]
                spec = [["T", s.to_wire()] if s is not None else ["S", v] for s, v in zip(slots, inputs, strict=True)]
                # Both workers' outputs come back every round: the candidate's so every round looks
                # the same from inside its process, the reference's so both do the same work
                # outside their timed calls (what the judge's clock sees beyond them is compared).
                outs = [out_arena.alloc(s, d) for s, d in self.out_struct]
                for s in outs:  # poisoned, so a slot never written cannot pass
                    view = out_arena.view(s)
                    view.fill_(float("nan") if view.is_floating_point() else 0x5A)
                calls[role] = Call(slots, outs, {"op": "prepare", "r": r, "in": spec,
                                                 "out": [s.to_wire() for s in outs], "warm": warm_call})
            first = REFERENCE if self.rng.random() < 0.5 else CANDIDATE
            plans.append(RoundPlan(r, first, audited, inputs, calls, warm_call=warm_call,
                                   block_call=k if timed_block else None))
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return plans


def write_inputs(arenas: dict[tuple[str, str], Arena], role: str, plan: RoundPlan) -> None:
    """A round's inputs into the worker's input slots (the caller synchronises)."""
    arena = arenas[role, "in"]
    for v, slot in zip(plan.inputs, plan.calls[role].in_slots, strict=True):
        if slot is not None:
            arena.view(slot).copy_(v)


def block_messages(plans: list[RoundPlan], role: str) -> list[dict[str, Any]]:
    """The rounds of a block as a worker's block message lists them: each round's slots."""
    return [{"r": plan.r, "in": plan.calls[role].prepare["in"], "out": plan.calls[role].prepare["out"]}
            for plan in plans]


def check_round_result(res: Any, r: int) -> None:
    """One call's result as a worker reported it: round ``r``'s, with a positive call time and a
    non-negative pre-call time; anything else is a protocol violation."""
    if int_field(res, "r") != r or int_field(res, "t") <= 0 or int_field(res, "pre") < 0:
        raise Verdicted(Verdict.HACK_DETECTED, "guard worker_protocol: round results do not match the rounds sent")


def block_results(reply: dict[str, Any], rounds: list[int]) -> list[dict[str, Any]]:
    """A worker's ``block`` reply checked against the rounds sent: exactly one result per round, in
    the order sent, each as ``check_round_result`` wants it; anything else is a protocol violation."""
    results = reply.get("rounds")
    if not isinstance(results, list) or len(results) != len(rounds):
        raise Verdicted(Verdict.HACK_DETECTED, "guard worker_protocol: block results do not match the rounds sent")
    for res, r in zip(results, rounds, strict=True):
        check_round_result(res, r)
    return results


def int_field(d: Any, key: str) -> int:
    v = d.get(key) if isinstance(d, dict) else None
    if not isinstance(v, int) or isinstance(v, bool):
        raise Verdicted(Verdict.HACK_DETECTED, f"guard worker_protocol: field {key!r} missing or not an integer")
    return v
