"""Placement: every timed call's memory placed anew, so where memory lies is noise, not a bias.

The rule, in two parts, both in both workers alike:

* *inputs*: the judge starts each timed batch's input slots at a random offset (0 to
  ``INPUT_SLACK_BYTES``, drawn per batch and per worker from a generator of its own) in an input
  arena that much larger, so the addresses a call reads its inputs from move from batch to batch
  (within a batch the rounds' slots follow one another, as before);
* *intermediates and outputs*: each worker holds two *spacers* across each call, buffers of random
  sizes drawn per call from the worker's own generator, allocated from its caching allocator just
  before the call and freed once the call is queued: one under ``SMALL_POOL_BYTES`` (PyTorch's
  CUDA allocator serves such requests from its small pool, where a short kernel's intermediates
  live) and one from ``SMALL_POOL_BYTES`` up to ``MAX_SPACER_BYTES`` (its large pool), each a
  multiple of ``SPACER_ALIGN``. The call's intermediates and outputs then come from other parts of
  the allocator's segments from call to call.

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
The input slack is allocated only where calls are placed; it is not part of the task's memory
plan (16 MiB per worker beside arenas of up to 1 GiB).

``EVALFARM_PLACE_CALLS`` in the judge's environment: unset places calls on a GPU only (on a CPU the
allocator hands out fresh pages anyway and the host clock's noise is larger than the effect); "1"
on every device, "0" nowhere.
"""

from __future__ import annotations

import random
from typing import Any

from evalfarm.judge.switch_env import on_off

PLACE_CALLS_ENV = "EVALFARM_PLACE_CALLS"
SMALL_POOL_BYTES = 1 << 20  # PyTorch's CUDA caching allocator: requests up to this, its small pool
MAX_SPACER_BYTES = 16 << 20
SPACER_ALIGN = 512  # the CUDA caching allocator's rounding
INPUT_SLACK_BYTES = 16 << 20

# The worker's note in evidence.isolation when its timed calls are placed anew.
PLACEMENT_NOTE = (f"timed calls placed anew: inputs at a random offset (0-{INPUT_SLACK_BYTES >> 20} MiB) per batch, "
                  f"two spacers (under 1 MiB and 1-{MAX_SPACER_BYTES >> 20} MiB) drawn per call held across each "
                  "call, so a call's inputs, intermediates and outputs lie elsewhere from call to call")


def place_calls_wanted(setting: str, device_type: str) -> bool:
    """Whether timed calls are placed anew (PLACE_CALLS_ENV's ``setting``): unset, on a GPU only;
    "1" everywhere; "0" nowhere. Any other setting is an error the operator sees at once."""
    return on_off(PLACE_CALLS_ENV, setting, device_type == "cuda", "on a GPU only")


def spacer_bytes(rng: random.Random, low: int = 0, high: int = MAX_SPACER_BYTES) -> int:
    """One spacer's size: uniform over the multiples of SPACER_ALIGN in [``low``, ``high``)."""
    return rng.randrange(low, max(high, low + SPACER_ALIGN), SPACER_ALIGN)


def input_offset(rng: random.Random, slack: int = INPUT_SLACK_BYTES, align: int = SPACER_ALIGN) -> int:
    """Where a batch's input slots start in an input arena with ``slack`` bytes to spare."""
    return rng.randrange(0, slack, align) if slack >= align else 0


class CallPlacement:
    """A worker's spacers (the rule above). ``spacer()`` before a call; drop the tensor it returns
    once the call is queued. ``placed`` and ``skipped`` count the calls with and without one."""

    def __init__(self, torch: Any, device: Any, seed: int, max_bytes: int = MAX_SPACER_BYTES) -> None:
        self.torch, self.device, self.max_bytes = torch, device, max_bytes
        self.rng = random.Random(seed)
        self.placed = 0
        self.skipped = 0

    def spacer(self) -> tuple[Any, ...] | None:
        """Two fresh buffers of random sizes, one from each of the allocator's pools, or None where
        they cannot be had (the call runs as it would without placement)."""
        small = spacer_bytes(self.rng, 0, min(SMALL_POOL_BYTES, self.max_bytes))
        large = spacer_bytes(self.rng, SMALL_POOL_BYTES + SPACER_ALIGN, self.max_bytes)
        try:
            bufs = tuple(self.torch.empty(n, dtype=self.torch.uint8, device=self.device) for n in (small, large))
        except (RuntimeError, MemoryError):  # torch.OutOfMemoryError is a RuntimeError
            self.skipped += 1
            return None
        self.placed += 1
        return bufs
