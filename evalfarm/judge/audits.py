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

A batch's audits start with one look at all of its audited rounds (``RoundAudit.identical``): for
each, whether every output tensor equals the reference's element for element (as ``torch.equal``)
and every input slot still holds its pristine input, all queued on the device and read back with
one synchronisation, where each round's own checks would wait for the device several times. A
round found so needs nothing more: ``compare_outputs`` returns for it exactly what it returns for
equal outputs. Every other round is checked in full, as before, so a failure's reason and
numbers never come from the shortcut.
"""

from __future__ import annotations

import dataclasses
import random
from typing import TYPE_CHECKING, Any

import torch

from evalfarm.compare import Comparison, check_structure, compare_outputs, flatten_output
from evalfarm.judge.arena import Arena
from evalfarm.judge.blame import Verdicted
from evalfarm.judge.roles import CANDIDATE, REFERENCE
from evalfarm.verdict import Verdict

if TYPE_CHECKING:
    from evalfarm.judge.rounds import RoundPlan


# RoundAudit.identical leaves out rounds with a tensor larger than this (their element-wise
# comparison would also need a temporary of this many bytes).
IDENTICAL_MAX_ELEMENTS = 1 << 24


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
    device: torch.device = torch.device("cpu")  # where the arenas are (RoundAudit.identical's flags)

    def outputs(self, plan: RoundPlan, role: str) -> Any:
        """``role``'s outputs of the round, as its worker laid them out (HACK_DETECTED where the
        reported layout does not fit its slots)."""
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

    def identical(self, plans: list[RoundPlan]) -> set[int]:
        """The rounds of ``plans`` (by ``r``) whose candidate outputs equal the reference's element
        for element, in structure as ``check_structure`` wants it, and whose candidate input slots
        (unless the reference writes into its inputs) still hold the pristine inputs: what
        ``compare`` and ``input_modified`` would find, read back with one synchronisation. A round
        with a tensor of more than ``IDENTICAL_MAX_ELEMENTS`` elements is left out (checked in
        full: its comparison costs far more than a synchronisation)."""
        flags: list[torch.Tensor] = []
        rounds: list[int] = []
        for plan in plans:
            try:
                cand, ref = self.outputs(plan, CANDIDATE), self.outputs(plan, REFERENCE)
            except Verdicted:
                continue  # a layout that does not fit its slots: compare() says so
            if check_structure(cand, ref):
                continue
            pairs = list(zip(flatten_output(cand), flatten_output(ref), strict=True))
            if not self.ref_mutates_inputs:
                arena = self.arenas[CANDIDATE, "in"]
                pairs += [(arena.view(slot), v) for v, slot in
                          zip(plan.inputs, plan.calls[CANDIDATE].in_slots, strict=True) if slot is not None]
            if any(a.numel() > IDENTICAL_MAX_ELEMENTS or a.shape != b.shape for a, b in pairs):
                continue
            parts = [torch.eq(a, b).all() for a, b in pairs]
            flags.append(torch.stack(parts).all() if parts else torch.ones((), dtype=torch.bool, device=self.device))
            rounds.append(plan.r)
        if not flags:
            return set()
        found = torch.stack(flags).cpu().tolist()  # the one synchronisation
        return {r for r, same in zip(rounds, found, strict=True) if same}

    def input_modified(self, plan: RoundPlan) -> bool:
        """Whether the candidate wrote into its inputs (never where the reference writes into its own)."""
        if self.ref_mutates_inputs:
            return False
        arena = self.arenas[CANDIDATE, "in"]
        return any(slot is not None and not torch.equal(arena.view(slot), v)
                   for v, slot in zip(plan.inputs, plan.calls[CANDIDATE].in_slots, strict=True))
