"""A task window's reference outputs, computed once and checked against by its later candidates.

The rule. In a task window (evalfarm.judge.task_window) whose workers both run in bubblewrap (the
strong sandbox, where nothing a candidate writes reaches a later worker), the correctness rounds
that run in blocks (``evalfarm.judge.correctness.correctness_block_rounds``) draw their inputs from
one secret of the window (``ReferenceMemo.secret``, held by the judge only) instead of each
candidate's own: round ``r`` holds the same inputs for every candidate of the window. The
reference's outputs of those rounds are then the same too, so the judge keeps a copy of each
(``keep``), within a memory budget (the device's first, at most ``DEVICE_SHARE`` of a GPU's memory,
then page-locked host memory on a GPU),
and for a later candidate the reference worker runs only the block rounds it holds no copy of
(``MemoRounds.split``); the candidate's outputs are compared with the kept copy exactly as with the
reference worker's (``RoundAudit.outputs``). Beyond the budget, rounds are run by the reference
as before. What is never shared: the warm-up rounds before the blocks, the timed rounds (each
candidate's own secret: fresh inputs, and the reference timed beside the candidate in every
round), the audit schedule, the precision gate's choice of rounds, and the workers themselves.

Why it keeps the guarantee. The secret never leaves the judge, so no candidate can draw the inputs
ahead; a pair of (inputs, output) an earlier candidate computed is of no use unless it reaches a
later one, which the strong sandbox prevents (the tests leave such pairs everywhere a candidate
can write and look for them in the next candidate). Where files may cross (the built-in sandbox)
or the owner turned the memo off (``REFERENCE_MEMO_ENV`` "0"), every candidate draws inputs of its
own and the reference runs every round, as before. The kept outputs are the reference worker's
(trusted: it runs the task's code only, in a process of its own whose arenas no candidate can
reach), copied by the judge before the slots are used again; a widened round (the precision
gate's) is kept under its widening, so a candidate whose gate widens another set of rounds never
gets an output of other inputs. Only a reference whose two set-up calls on the same inputs gave the
same outputs bit for bit, and whose inputs for one round drawn twice were the same
(``Reference.not_repeatable``, ``evalfarm.judge.setup.inputs_not_repeatable``), is kept: one whose
output depends on earlier calls or on randomness, or a get_inputs with state of its own, is run for
every candidate.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from evalfarm.compare import flatten_output
from evalfarm.judge.roles import REFERENCE
from evalfarm.judge.roofline import tensor_bytes
from evalfarm.judge.switch_env import mebibytes

if TYPE_CHECKING:
    from evalfarm.judge.inputs import InputSource
    from evalfarm.judge.rounds import RoundPlan

# The owner's switch in the judge's environment: unset, the default budget; "0", off (every round
# run by the reference); a positive integer, the budget in MiB (device memory, and as much again in
# page-locked host memory on a GPU).
REFERENCE_MEMO_ENV = "EVALFARM_REFERENCE_MEMO_MB"
DEFAULT_BUDGET_BYTES = 1 << 30
# On a GPU, kept outputs take at most this share of the card's memory (the rest is the workers'):
# beyond it they go to page-locked host memory.
DEVICE_SHARE = 1 / 16


def budget_bytes(setting: str) -> int:
    """REFERENCE_MEMO_ENV in bytes: the default where unset, 0 for "0" (off); anything else that is
    not a non-negative integer of MiB is an error the operator sees at once."""
    return mebibytes(REFERENCE_MEMO_ENV, setting, DEFAULT_BUDGET_BYTES, zero_means="off")


@dataclasses.dataclass
class Kept:
    """One round's reference outputs (flattened, as the worker laid them out) and its call's report."""

    outputs: list[torch.Tensor]
    times: dict[str, Any]
    on_host: bool  # in page-locked host memory (a GPU judge moves them to the device to compare)


class ReferenceMemo:
    """The window's shared correctness secret and its kept reference outputs, by (round, widening)."""

    def __init__(self, device: torch.device, budget: int = DEFAULT_BUDGET_BYTES) -> None:
        self.secret = secrets.token_bytes(32)
        self.device = device
        self.budget = budget
        self.device_budget = budget
        if device.type == "cuda":
            total = torch.cuda.get_device_properties(device).total_memory
            self.device_budget = min(budget, int(total * DEVICE_SHARE))
        self.device_bytes = 0
        self.host_bytes = 0
        self._kept: dict[tuple[int, str], Kept] = {}

    def get(self, r: int, widening: str) -> Kept | None:
        return self._kept.get((r, widening))

    def __len__(self) -> int:
        return len(self._kept)

    def keep(self, r: int, widening: str, outputs: list[torch.Tensor], times: dict[str, Any]) -> bool:
        """A copy of round ``r``'s reference outputs, where the budget has room (device memory first,
        then page-locked host memory on a GPU); False where it has none (the round stays the
        reference's to run). Outputs that are not tensors are never kept."""
        if (r, widening) in self._kept:
            return False
        if not outputs or not all(isinstance(v, torch.Tensor) for v in outputs):
            return False
        size = tensor_bytes(outputs)
        if self.device_bytes + size <= self.device_budget:
            copies = [v.clone() for v in outputs]
            self.device_bytes += size
            on_host = False
        elif self.device.type == "cuda" and self.host_bytes + size <= self.budget:
            copies = [torch.empty(v.shape, dtype=v.dtype, pin_memory=True).copy_(v) for v in outputs]
            self.host_bytes += size
            on_host = True
        else:
            return False
        self._kept[r, widening] = Kept(copies, {k: v for k, v in times.items() if k == "t"}, on_host)
        return True

    def outputs_on_device(self, kept: Kept) -> list[torch.Tensor]:
        """A kept round's outputs where the judge compares them (its device). Copied from the host
        synchronously: the audits may read them on a stream of their own (evalfarm.judge.audit_overlap)."""
        if not kept.on_host:
            return kept.outputs
        return [v.to(self.device) for v in kept.outputs]

    def evidence(self, reused_here: int) -> dict[str, Any]:
        """What ``evidence.task_window["reference_memo"]`` says for one candidate."""
        return {"rounds_reused": reused_here, "rounds_kept": len(self._kept),
                "kept_mib": round((self.device_bytes + self.host_bytes) / (1 << 20), 3),
                "budget_mib": self.budget >> 20}


class MemoRounds:
    """One evaluation's use of the window's memo: which of a block's rounds the reference must run
    (``split``), and the copies of what it ran (``keep``). ``read_reference``: a round's reference
    outputs as the audits read them from the reference worker's arena (RoundAudit.outputs)."""

    def __init__(self, memo: ReferenceMemo, source: InputSource, read_reference: Callable[[RoundPlan], Any],
                 tuple_out: bool) -> None:
        self.memo = memo
        self.source = source
        self.read_reference = read_reference
        self.tuple_out = tuple_out
        self.reused = 0

    def split(self, plans: list[RoundPlan]) -> list[RoundPlan]:
        """The rounds of ``plans`` the reference worker must run; every other one gets its kept
        outputs (``RoundPlan.kept_reference``) and its reference call's report."""
        run: list[RoundPlan] = []
        for plan in plans:
            kept = None
            if plan.r in self.source.shared_rounds:
                kept = self.memo.get(plan.r, self.source.widening(plan.r))
            if kept is None:
                run.append(plan)
                continue
            outputs = self.memo.outputs_on_device(kept)
            plan.kept_reference = tuple(outputs) if self.tuple_out else outputs[0]
            plan.times[REFERENCE] = dict(kept.times)
            self.reused += 1
        return run

    def keep(self, ran: list[RoundPlan]) -> None:
        """Copies of the reference's outputs of the shared rounds in ``ran`` (within the budget)."""
        for plan in ran:
            if plan.r in self.source.shared_rounds:
                self.memo.keep(plan.r, self.source.widening(plan.r), flatten_output(self.read_reference(plan)),
                               plan.times.get(REFERENCE, {}))
