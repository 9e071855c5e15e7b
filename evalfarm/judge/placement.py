"""Placement: every timed call's memory placed anew, so where memory lies is noise, not a bias.

The rule. In a timed block each worker holds a *spacer* across each call: a buffer of a random
size, drawn per call from the worker's own generator (0 to ``MAX_SPACER_BYTES``, a multiple of
``SPACER_ALIGN``), allocated from the worker's caching allocator just before the call and freed
once the call is queued. The call's intermediates and outputs then come from other parts of the
allocator's segments from call to call, so the addresses each side's kernels touch vary call by
call, in both workers alike.

Why: a worker process keeps the same blocks for a call's memory call after call, and two
processes' blocks lie in different pages, so how an address falls on the L2's slices and the
memory's channels is fixed for a whole evaluation and differs between the two workers. On an
H200 the same code timed against its own copy in one process (benchmarks/probes/drift_probe.py,
L1/1 small, 3000 paired rounds, three runs) read 1.016, 0.995 and 0.989 with each side's memory
reused call after call, and 1.006, 1.001 and 0.996 with it placed anew per round: the gap between
two evaluations of one candidate is largely where its memory happened to lie, which no number of
rounds inside one evaluation can see. Placed anew, that gap becomes call-to-call noise the
interval does see and the median averages out.

What it does not change: inputs are still fresh per call and written by the judge, outputs kept
until the block ends, audits and bounds as before. The spacer is the worker's, drawn in the
candidate's process too, so a candidate may undo its own placement; it can gain nothing from that
but the placement luck the rule exists to average out, and the judge's clock, audits and charges
hold as before. A spacer that cannot be allocated (memory short) is skipped for that call.

``EVALFARM_PLACE_CALLS`` in the judge's environment: unset places calls on a GPU only (on a CPU the
allocator hands out fresh pages anyway and the host clock's noise is larger than the effect); "1"
on every device, "0" nowhere.
"""

from __future__ import annotations

import random
from typing import Any

PLACE_CALLS_ENV = "EVALFARM_PLACE_CALLS"
MAX_SPACER_BYTES = 16 << 20
SPACER_ALIGN = 512  # the CUDA caching allocator's rounding

# The worker's note in evidence.isolation when its timed calls are placed anew.
PLACEMENT_NOTE = (f"timed calls placed anew: a spacer of 0-{MAX_SPACER_BYTES >> 20} MiB drawn per call is held "
                  "across each call, so a call's intermediates and outputs lie elsewhere from call to call")


def place_calls_wanted(setting: str, device_type: str) -> bool:
    """Whether timed calls are placed anew (PLACE_CALLS_ENV's ``setting``): unset, on a GPU only;
    "1" everywhere; "0" nowhere. Any other setting is an error the operator sees at once."""
    setting = setting.strip()
    if setting == "":
        return device_type == "cuda"
    if setting in ("0", "1"):
        return setting == "1"
    raise ValueError(f"{PLACE_CALLS_ENV}={setting!r}: expected 0 or 1 (unset: on a GPU only)")


def spacer_bytes(rng: random.Random, max_bytes: int = MAX_SPACER_BYTES) -> int:
    """One call's spacer size: uniform over the multiples of SPACER_ALIGN below ``max_bytes``."""
    return rng.randrange(0, max(max_bytes, SPACER_ALIGN), SPACER_ALIGN)


class CallPlacement:
    """A worker's spacers (the rule above). ``spacer()`` before a call; drop the tensor it returns
    once the call is queued. ``placed`` and ``skipped`` count the calls with and without one."""

    def __init__(self, torch: Any, device: Any, seed: int, max_bytes: int = MAX_SPACER_BYTES) -> None:
        self.torch, self.device, self.max_bytes = torch, device, max_bytes
        self.rng = random.Random(seed)
        self.placed = 0
        self.skipped = 0

    def spacer(self) -> Any:
        """A fresh buffer of a random size, or None where it cannot be had (the call runs as it
        would without placement)."""
        try:
            buf = self.torch.empty(spacer_bytes(self.rng, self.max_bytes), dtype=self.torch.uint8, device=self.device)
        except (RuntimeError, MemoryError):  # torch.OutOfMemoryError is a RuntimeError
            self.skipped += 1
            return None
        self.placed += 1
        return buf
