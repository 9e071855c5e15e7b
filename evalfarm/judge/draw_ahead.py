"""The next correctness block's inputs drawn while the workers run this one.

The rule. While both workers run a correctness block (evalfarm.judge.correctness.run_block), the
judge itself only waits for their replies; a helper thread uses that wait to draw the *next* batch's
inputs (``InputSource.inputs``, the judge's own pristine copies, in the judge's memory), where that
batch is a correctness block too. ``RoundPlanner.plan`` then takes them instead of drawing them.
Nothing else changes: round r's inputs are the source's r-th draw whichever thread drew them (the
draw is seeded per round), they reach a worker's input slots only in that worker's own exchange,
as before, and no draw ever runs while a timed call does (the thread is started only for a batch
of block rounds, during another batch of block rounds, and joined before the judge goes on). A
draw that fails in the thread is left to the planner, which draws that round again itself and
meets the same failure where it always did.

Used where the device has room for a second batch of the judge's input copies
(``MemoryGate.room_for``) and the operator's switch allows (``DRAW_AHEAD_ENV``: on a CPU by default).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import torch

from evalfarm.judge.inputs import InputSource
from evalfarm.judge.switch_env import on_off

log = logging.getLogger(__name__)

# The operator's switch in the judge's environment: unset, on a CPU only, where the draws are host
# work (2 s of 1000 inputs on a 2-core machine; on an H100 0.2 s of device work: docs/benchmarks.md,
# 2b); "1" everywhere; "0" nowhere.
DRAW_AHEAD_ENV = "EVALFARM_DRAW_AHEAD"


def cuda_index(device: torch.device) -> int | None:
    """The CUDA device's index (the caller's current device where ``device`` names none); None off CUDA."""
    if device.type != "cuda":
        return None
    return device.index if device.index is not None else torch.cuda.current_device()


def draw_ahead_wanted(setting: str, device_type: str) -> bool:
    """Whether the next correctness block's inputs are drawn ahead (DRAW_AHEAD_ENV's ``setting``).
    Any setting but unset, "0" and "1" is an error the operator sees at once."""
    return on_off(DRAW_AHEAD_ENV, setting, device_type != "cuda", "on a CPU only")


class DrawAhead:
    """At most one batch of inputs drawn in a helper thread: ``start`` it, ``join`` it (always,
    before the judge goes on), then ``take`` each round's inputs (None for a round not drawn)."""

    def __init__(self, source: InputSource, device: torch.device, phases: dict[str, float] | None = None) -> None:
        self._source = source
        # The thread's current device, by index ("cuda" alone names the caller's current one).
        self._index = cuda_index(device)
        self._thread: threading.Thread | None = None
        self._drawn: dict[int, list[Any]] = {}
        self._seconds = 0.0
        # The evaluation's round phases: the thread's drawing time goes into "rounds_inputs_ahead"
        # (overlapped with the blocks, so in no other phase's time).
        self._phases = phases if phases is not None else {}

    def start(self, rounds: range) -> None:
        """Draw ``rounds`` in a helper thread (one batch at a time)."""
        if self._thread is not None:
            raise RuntimeError("a batch is still being drawn ahead: join it first")
        self._drawn = {}
        self._thread = threading.Thread(target=self._draw, args=(rounds,), name="evalfarm-draw-ahead", daemon=True)
        self._thread.start()

    def _draw(self, rounds: range) -> None:
        t0 = time.monotonic()
        try:
            if self._index is not None:
                torch.cuda.set_device(self._index)  # the thread's own current device
            for r in rounds:
                self._drawn[r] = self._source.inputs(r)
            if self._index is not None:
                torch.cuda.synchronize(self._index)
        except BaseException as err:  # noqa: BLE001 - the planner draws the rest itself and meets it there
            log.warning("drawing ahead stopped (the planner draws the rest itself): %s: %s", type(err).__name__, err)
        finally:
            self._seconds = time.monotonic() - t0

    def join(self) -> None:
        """Wait for the batch being drawn, if any (a draw is bounded by the task's own get_inputs)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            self._phases["rounds_inputs_ahead"] = self._phases.get("rounds_inputs_ahead", 0.0) + self._seconds

    def take(self, r: int) -> list[Any] | None:
        """Round ``r``'s inputs if they were drawn ahead (once), else None."""
        if self._thread is not None:
            raise RuntimeError("inputs taken while a batch is still being drawn ahead")
        return self._drawn.pop(r, None)
