"""Waiting for a quiet GPU: nothing but the caller's own work running on the device.

The candidate's process is stopped while the reference runs, but work it queued on the GPU before
that would still run, and share the device with the reference's call. A tiny probe kernel returns
at once on an idle device and waits for a time slice on a busy one (another context's kernel runs
until its slice ends); three quick probes in a row mean quiet. Used by the reference worker (before
a call it prepared on request) and by the judge (before it writes the inputs of a reference call
prepared ahead, from its own context, which those writes use anyway): trusted processes only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

_perf_ns = time.perf_counter_ns

# A probe counts as quick within QUIET_FACTOR times its idle latency, clamped to [QUIET_FLOOR_S,
# QUIET_CAP_S] (a probe that shares the device with another context's running kernel waits for a
# time slice); the wait gives up after QUIET_WAIT_S.
QUIET_FACTOR = 5
QUIET_FLOOR_S = 250e-6
QUIET_CAP_S = 1e-3
QUIET_WAIT_S = 5.0


class QuietProbe:
    """A one-element tensor on ``device`` and the latency a probe of it has on an idle device."""

    def __init__(self, torch: Any, device: Any, sync: Callable[[], None]) -> None:
        self._probe = torch.zeros(1, device=device)
        self._sync = sync
        baseline = min(self.once() for _ in range(5))
        self.limit_s = min(max(QUIET_FACTOR * baseline, QUIET_FLOOR_S), QUIET_CAP_S)

    def once(self) -> float:
        """One probe: a tiny kernel and a device-wide synchronisation, in seconds."""
        t0 = _perf_ns()
        self._probe.add_(1)
        self._sync()
        return (_perf_ns() - t0) / 1e9

    def wait(self, give_up_s: float = QUIET_WAIT_S) -> tuple[bool, float]:
        """Probe until three in a row are quick: (quiet, seconds waited); not quiet after ``give_up_s``."""
        start = _perf_ns()
        quick = 0
        while quick < 3:
            quick = quick + 1 if self.once() <= self.limit_s else 0
            if (_perf_ns() - start) / 1e9 > give_up_s:
                return False, (_perf_ns() - start) / 1e9
        return True, (_perf_ns() - start) / 1e9
