"""A correctness block's audits run while the reference worker runs the next block.

The rule. Where two correctness blocks follow one another, the judge does not wait for the first
batch's audits before it starts the second: the batches take turns between the two halves of each
arena (``RoundPlanner.pipelined``), the first batch's comparisons run in a helper thread
(``AuditLook``: ``RoundAudit.passing``, on a CUDA stream of its own) while the reference worker
runs the second batch's block, and the thread is joined, and every round of the first batch
checked as before (``Judge._check_batch``), before the candidate's process is continued for its
block of the second. So what the audits read never changes under them: the candidate's process is
stopped throughout (its outputs and inputs of the first batch stay as its block left them), the
reference worker (trusted) writes only the other half of its arenas, and the judge writes the
second batch's inputs only into that other half. A failure in the first batch ends the evaluation
before the candidate's second block runs, with the verdict it always had (an earlier round's
verdict comes first also where the reference's block failed meanwhile). Only correctness blocks
overlap this way (never timed), and the last block's audits run before any timed call, as before.

The reference's block then runs beside the judge's comparisons on the same device: its calls'
times are never samples (correctness blocks are not timed), so it skips the quiet-GPU wait a timed
reference call makes.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

import torch

from evalfarm.compare import Comparison
from evalfarm.judge.draw_ahead import cuda_index
from evalfarm.judge.switch_env import on_off

if TYPE_CHECKING:
    from evalfarm.judge.audits import RoundAudit
    from evalfarm.judge.rounds import RoundPlan

log = logging.getLogger(__name__)

# The operator's switch in the judge's environment: "1" on, "0" or unset off (every batch audited
# before the next is run). Off by default: correctness took longer with it on a 2-core CPU machine
# (the comparisons take the cores the workers' calls need) and on an H100 (memory-bound comparisons
# slowed the reference's memory-bound block calls, and half batches doubled the blocks):
# docs/benchmarks.md, 2b.
AUDIT_OVERLAP_ENV = "EVALFARM_AUDIT_OVERLAP"


def audit_overlap_wanted(setting: str, device_type: str) -> bool:
    """Whether audits overlap the next block (AUDIT_OVERLAP_ENV's ``setting``). Any setting but
    unset, "0" and "1" is an error the operator sees at once. Off by default on every device."""
    return on_off(AUDIT_OVERLAP_ENV, setting, False, "off")


class AuditLook:
    """The passing rounds of one batch (``RoundAudit.passing``), found in a helper thread started at
    construction; ``result`` joins it (always called before the candidate's process runs again)."""

    def __init__(self, audit: RoundAudit, plans: list[RoundPlan], device: torch.device,
                 phases: dict[str, float] | None = None) -> None:
        self.plans = plans
        self.done = False  # the batch has been checked (Judge._check_batch), or its check began
        self._audit = audit
        self._found: dict[int, Comparison] = {}
        self._seconds = 0.0
        self._phases = phases if phases is not None else {}
        self._stream: Any = None
        self._index = cuda_index(device)
        if self._index is not None:
            # Its own stream, after what the judge's stream has queued so far; the judge's writes of
            # the next batch's inputs then never wait for these comparisons.
            self._stream = torch.cuda.Stream(device)
            self._stream.wait_stream(torch.cuda.current_stream(device))
        self._thread = threading.Thread(target=self._look, name="evalfarm-audit-look", daemon=True)
        self._thread.start()

    def _look(self) -> None:
        t0 = time.monotonic()
        try:
            if self._stream is not None:
                torch.cuda.set_device(self._index)
                with torch.cuda.stream(self._stream):
                    self._found = self._audit.passing(self.plans)
                self._stream.synchronize()
            else:
                self._found = self._audit.passing(self.plans)
        except BaseException as err:  # noqa: BLE001 - nothing found: the judge checks every round in full
            log.warning("audits beside the next block stopped (the judge checks the batch itself): %s: %s",
                        type(err).__name__, err)
            self._found = {}
        finally:
            self._seconds = time.monotonic() - t0

    def result(self) -> dict[int, Comparison]:
        """The passing rounds (by ``r``); a round missing is checked in full by the caller."""
        self.join()
        return self._found

    def join(self) -> None:
        """Wait for the thread (bounded by the comparisons of one batch); its time goes into the
        evaluation's ``rounds_audit_overlapped`` phase once."""
        self._thread.join()
        self._phases["rounds_audit_overlapped"] = self._phases.get("rounds_audit_overlapped", 0.0) + self._seconds
        self._seconds = 0.0
