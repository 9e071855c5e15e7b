"""A GPU evaluation's three processes, each on a CPU core of its own.

Between its timed calls a worker sleeps (stopped, or blocked on its pipe); woken, it may land on
a core where another process ran meanwhile, with its code and data gone from that core's caches,
or wait for a core at all. A short kernel's call (tens of microseconds of host work around it)
pays that; the reference's eight small launches pay it more than a fused candidate's one, so
short calls were scored low (docs/security.md, "What does not close the gap").

In a two-process probe (benchmarks/probes/gpu_switch_probe.py, H100) pinning moved the protocol's ratio for 1M-element calls from 2.75 to 3.06 (3.44 in one process). In the farm itself it did
not: the small-profile L1/1 and L2/3 variants scored the same pinned and not, within the runs'
own spread (tanh_gelu 2.93 and 2.78 pinned, 2.88 and 2.87 not; identical copies 0.96-1.01 in
both; docs/security.md), and a pinned judge does its CPU work on one core. So it is off by
default: ``EVALFARM_PIN_CORES=1`` turns it on, for hosts where it measures better, and
``EVALFARM_PIN_CORES=shared`` puts all three processes on one core.

The cores come from the judge's allowed set, three per GPU index, so the slots of a daemon on a
host with 3 x GPUs cores or more do not share. CPU evaluations are never pinned (their workers'
threads share a quota, evalfarm.sandbox.cgroup).
"""

from __future__ import annotations

import dataclasses
import logging
import os

log = logging.getLogger("evalfarm.judge")
PIN_ENV = "EVALFARM_PIN_CORES"
# The cores this process was allowed before pin_self narrowed it to one.
_allowed_before_pin: set[int] | None = None


@dataclasses.dataclass(frozen=True)
class CorePlan:
    judge: int
    reference: int
    candidate: int

    def worker(self, role: str) -> int:
        return self.reference if role == "reference" else self.candidate


def mode() -> str:
    """"off", "own" (a core for each of the three processes) or "shared" (one core for all
    three: they never compute at the same time, and each call then runs on the core the process
    before it just left, whichever worker it is)."""
    value = os.environ.get(PIN_ENV, "0").strip().lower()
    if value in ("1", "on", "true", "own"):
        return "own"
    if value == "shared":
        return "shared"
    if value not in ("", "0", "off", "false"):
        log.warning("%s=%r is not one of 0, own (or 1), shared: cores not pinned", PIN_ENV, value)
    return "off"


def plan(device: str, allowed: set[int] | None = None) -> CorePlan | None:
    """Cores for a judge on ``device`` ("cuda:N") and its workers, or None: a CPU device, pinning
    off, or fewer than three cores allowed. "own": three distinct cores; "shared": one core,
    the N-th allowed, for all three."""
    how = mode()
    if not device.startswith("cuda") or how == "off":
        return None
    if allowed is None:
        allowed = _allowed_before_pin if _allowed_before_pin is not None else os.sched_getaffinity(0)
    cores = sorted(allowed)
    if len(cores) < 3:
        return None
    index = int(device.split(":")[1]) if ":" in device else 0
    if how == "shared":
        core = cores[index % len(cores)]
        return CorePlan(judge=core, reference=core, candidate=core)
    base = 3 * index
    picked = [cores[(base + j) % len(cores)] for j in range(3)]
    return CorePlan(judge=picked[0], reference=picked[1], candidate=picked[2])


def pin_self(core: int) -> str:
    """Pin the calling process (every thread it starts later inherits it); "" or a note."""
    global _allowed_before_pin
    if _allowed_before_pin is None:
        _allowed_before_pin = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {core})
    except OSError as err:
        return f"not pinned to core {core}: {err.strerror or err}"
    return ""
