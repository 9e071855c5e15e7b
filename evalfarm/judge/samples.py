"""Timing samples: what each counted timed round leaves for the score and its charges.

The rule. A round's times are a sample only when they were measured under the timing protocol's
conditions: never a correctness block's (its inputs were all written before it started), with timed
blocks only their calls after each block's warm-up (``WARMUP_CALLS``), never a warm-up round's, and
never one run while the owner held the timed rounds (a standby of this device starting up: checked,
set aside). Per sample both workers' reported call and pre-call times are kept, what the judge's own
clock saw beyond the call (``untimed``), the CUDA event times where the worker recorded them, and the
candidate's clock against what encloses it (``clock_pairs``: its events on lone calls, the judge's
window on timed blocks). A re-measure (``evalfarm.timing.decide``'s discard) starts a fresh
``Samples``; the round counts (``RoundCounts``) run on.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from evalfarm.judge.roles import CANDIDATE, REFERENCE

if TYPE_CHECKING:
    from evalfarm.judge.rounds import RoundPlan


@dataclasses.dataclass
class Samples:
    """The samples kept so far, one entry per counted round (nanoseconds unless named)."""

    t_ref: list[int] = dataclasses.field(default_factory=list)
    t_cand: list[int] = dataclasses.field(default_factory=list)
    pre_ref: list[int] = dataclasses.field(default_factory=list)
    pre_cand: list[int] = dataclasses.field(default_factory=list)
    untimed_ref: list[int] = dataclasses.field(default_factory=list)  # the judge-timed exchange minus the reported call
    untimed_cand: list[int] = dataclasses.field(default_factory=list)
    tails_ref: list[int] = dataclasses.field(default_factory=list)  # timed blocks: each sample's share of its block's tail
    tails_cand: list[int] = dataclasses.field(default_factory=list)
    e_ref: list[float] = dataclasses.field(default_factory=list)  # CUDA event us, where both workers recorded them
    e_cand: list[float] = dataclasses.field(default_factory=list)
    clock_pairs: list[tuple[int, float]] = dataclasses.field(default_factory=list)  # the candidate's call ns and event us
    warm_call_rounds: int = 0  # of the samples kept, as rounds is

    def add(self, plan: RoundPlan, timed: bool) -> None:
        """A counted round's times; ``timed``: the evaluation's timed rounds run in timed blocks."""
        ref, cand = plan.times[REFERENCE], plan.times[CANDIDATE]
        t_ref, t_cand = ref["t"], cand["t"]
        self.warm_call_rounds += plan.warm_call
        self.t_ref.append(t_ref)
        self.t_cand.append(t_cand)
        self.pre_ref.append(ref["pre"])
        self.pre_cand.append(cand["pre"])
        self.untimed_ref.append(ref["j"] - t_ref)
        self.untimed_cand.append(cand["j"] - t_cand)
        e_ref, e_cand = ref.get("e"), cand.get("e")
        if isinstance(e_ref, int | float) and isinstance(e_cand, int | float):
            self.e_ref.append(float(e_ref))
            self.e_cand.append(float(e_cand))
            if not timed:  # the worker's clock around the call against its events
                self.clock_pairs.append((t_cand, float(e_cand)))
        if timed:  # the judge's window around the call against the time reported for it
            self.clock_pairs.append((cand["j"], t_cand / 1e3))
            self.tails_ref.append(ref["tail"])
            self.tails_cand.append(cand["tail"])

    def speedups(self, charge_ns: int) -> list[float]:
        """Each sample's speedup, ``charge_ns`` added to the candidate's call."""
        return [tr / (tc + charge_ns) for tr, tc in zip(self.t_ref, self.t_cand, strict=True)]


@dataclasses.dataclass
class RoundCounts:
    """How the evaluation's rounds went, for the evidence; never reset by a re-measure."""

    audited: int = 0
    set_aside: int = 0  # counted rounds run while the owner held them: checked, times not used
    in_blocks: int = 0  # correctness rounds run in correctness blocks
    timed_block_rounds: int = 0
    remeasured: int = 0
