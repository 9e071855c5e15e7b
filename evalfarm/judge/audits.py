"""Which timed rounds' outputs the judge checks against the reference (``audit_fraction``).

Every correctness round is checked. Of the timed rounds after them, one at a random position in
every window of ``round(1 / audit_fraction)`` rounds is (stratified sampling): the same share on
average as drawing each round independently, but a candidate that is wrong in every timed round
is caught within the first window, where independent draws let it through with probability
``(1 - audit_fraction) ** rounds`` (0.9 ** 35, about 2.5%, at 35 timed rounds). A candidate
wrong in some rounds only is caught in each window with probability (its wrong rounds there) /
(the window), as with independent draws. The positions come from the judge's secret generator,
one per window, drawn when the window is first reached; the candidate never learns them.

An audit (``RoundAudit``) compares the candidate's outputs of the round, read from its output
arena with the strides its worker reported, with the reference worker's for the same inputs
(``evalfarm.compare.compare_outputs``), and, unless the reference itself writes into its inputs,
checks that the candidate's input slots still hold the judge's pristine inputs.

A batch's audits start with one look at all of its audited rounds (``RoundAudit.prechecked``):
for each, the comparison's device work queued (``evalfarm.compare.queued_check``) with whether
every input slot still holds its pristine input, all read back with one synchronisation, where each
round's own checks would wait for the device several times. A round that passes with those
figures alone (outputs equal to the reference's, or within the strict policy's bounds by its
shortcut) gets exactly the Comparison ``compare_outputs`` returns for it, from the same operations
on the same data. Every other round is checked in full, as before, so a failure's reason and
numbers never come from the look.
"""

from __future__ import annotations

import dataclasses
import random
from typing import TYPE_CHECKING, Any

import torch

from evalfarm.compare import (
    CHUNK_ELEMENTS,
    Comparison,
    check_structure,
    compare_outputs,
    flatten_output,
    passed,
    queued_check,
)
from evalfarm.judge.arena import Arena
from evalfarm.judge.blame import Verdicted
from evalfarm.judge.roles import CANDIDATE, REFERENCE
from evalfarm.verdict import Verdict

if TYPE_CHECKING:
    from evalfarm.judge.rounds import RoundPlan


class AuditSchedule:
    def __init__(self, fraction: float, first_timed_round: int, rng: random.Random) -> None:
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"audit fraction must be in [0, 1], got {fraction!r}")
        self.first_timed_round = first_timed_round
        self.window = 0 if fraction <= 0.0 else max(1, round(1.0 / fraction))
        self._rng = rng
        self._picks: dict[int, int] = {}

    def audited(self, r: int) -> bool:
        """Whether round ``r`` (0-based, as the judge numbers them) is checked."""
        if r < self.first_timed_round:
            return True
        if not self.window:
            return False
        window, position = divmod(r - self.first_timed_round, self.window)
        if window not in self._picks:
            self._picks[window] = self._rng.randrange(self.window)
        return position == self._picks[window]


@dataclasses.dataclass(frozen=True)
class RoundAudit:
    """What checking a round needs beside the round itself, fixed by the set-up."""

    arenas: dict[tuple[str, str], Arena]  # (role, "in" | "out")
    tuple_out: bool  # the task's Model returns a tuple (or list) of tensors
    tolerance: Any  # ScoreConfig.tolerance
    ref_mutates_inputs: bool  # the reference writes into its own inputs: the candidate may too

    def outputs(self, plan: RoundPlan, role: str) -> Any:
        """``role``'s outputs of the round, as its worker laid them out (HACK_DETECTED where the
        reported layout does not fit its slots). The reference's of a round it did not run: the
        copy the task window kept (``RoundPlan.kept_reference``, evalfarm.judge.reference_memo)."""
        if role == REFERENCE and plan.kept_reference is not None:
            return plan.kept_reference
        arena = self.arenas[role, "out"]
        slots = plan.calls[role].out_slots
        layouts = plan.times[role].get("strides")
        if not isinstance(layouts, list) or len(layouts) != len(slots):
            layouts = [None] * len(slots)
        try:
            views = [arena.strided_view(s, st) for s, st in zip(slots, layouts, strict=True)]
        except ValueError as err:
            raise Verdicted(Verdict.HACK_DETECTED, f"guard worker_protocol: {err}") from None
        return tuple(views) if self.tuple_out else views[0]

    def compare(self, plan: RoundPlan) -> Comparison:
        """The candidate's outputs against the reference's."""
        return compare_outputs(self.outputs(plan, CANDIDATE), self.outputs(plan, REFERENCE), self.tolerance)

    def prechecked(self, plans: list[RoundPlan]) -> dict[int, Comparison]:
        """The rounds of ``plans`` (by ``r``) that pass, with the Comparison ``compare`` would
        return for each, found by one look at all of them: each output pair's comparison queued
        on the device (``evalfarm.compare.queued_check``), with whether each candidate input slot
        still holds its pristine input (unless the reference writes into its inputs), then read
        back with one synchronisation. A round missing here (one that may fail, or whose outputs
        only ``compare`` can judge) is checked in full."""
        queued: list[tuple[RoundPlan, list[Any], list[torch.Tensor], torch.Tensor | None]] = []
        for plan in plans:
            try:
                cand, ref = self.outputs(plan, CANDIDATE), self.outputs(plan, REFERENCE)
            except Verdicted:
                continue  # a layout that does not fit its slots: compare() says so
            if check_structure(cand, ref):
                continue
            refs = flatten_output(ref)
            checks = [queued_check(o, r, self.tolerance) for o, r in zip(flatten_output(cand), refs, strict=True)]
            inputs = [] if self.ref_mutates_inputs else [
                (self.arenas[CANDIDATE, "in"].view(slot), v)
                for v, slot in zip(plan.inputs, plan.calls[CANDIDATE].in_slots, strict=True) if slot is not None]
            if any(c is None for c in checks) or any(v.numel() > CHUNK_ELEMENTS for v, _ in inputs):
                continue  # only compare() answers, or an input so large that a look costs more than it saves
            flags = [torch.eq(view, v).all().to(torch.float64).reshape(1) for view, v in inputs]
            queued.append((plan, refs, [c for c in checks if c is not None], torch.cat(flags) if flags else None))
        if not queued:
            return {}
        # The one synchronisation: each round's scalars, output pair by output pair, then its input flags.
        values = iter(torch.cat([t for _, _, checks, flags in queued for t in (*checks, *(() if flags is None else (flags,)))])
                      .cpu().tolist())
        found: dict[int, Comparison] = {}
        for plan, refs, checks, flags in queued:
            rows = [[next(values) for _ in range(t.numel())] for t in checks]
            untouched = flags is None or all([next(values) for _ in range(flags.numel())])
            results = [passed(row, r) for row, r in zip(rows, refs, strict=True)]
            if not untouched or any(c is None for c in results):
                continue
            worst = Comparison(ok=True)  # as compare_outputs picks it
            for i, c in enumerate(results):
                assert c is not None
                c.output_index = i
                if c.rel_l2_error >= worst.rel_l2_error:
                    worst = c
            found[plan.r] = worst
        return found

    def passing(self, plans: list[RoundPlan]) -> dict[int, Comparison]:
        """The audited rounds of ``plans`` that pass, each with its Comparison: ``prechecked``'s look,
        then each round it left open compared in full, with its inputs checked. What it leaves out
        (a round that fails, or whose layout does not fit) the caller checks itself, as before.
        Judge work only (evalfarm.judge.audit_overlap runs it beside the reference's next block)."""
        audited = [plan for plan in plans if plan.audited]
        found = self.prechecked(audited)
        for plan in audited:
            if plan.r in found:
                continue
            try:
                c = self.compare(plan)
            except Verdicted:
                continue
            if c.ok and not self.input_modified(plan):
                found[plan.r] = c
        return found

    def input_modified(self, plan: RoundPlan) -> bool:
        """Whether the candidate wrote into its inputs (never where the reference writes into its own)."""
        if self.ref_mutates_inputs:
            return False
        arena = self.arenas[CANDIDATE, "in"]
        return any(slot is not None and not torch.equal(arena.view(slot), v)
                   for v, slot in zip(plan.inputs, plan.calls[CANDIDATE].in_slots, strict=True))
