"""The physical floor: no correct call is faster than writing its outputs to DRAM can be.

The rule (``physical_floor``). A correct call leaves every output byte written; at most the L2's
worth of them can still sit in the cache at its end, so the rest went to DRAM, which takes at least
that over the device's peak DRAM bandwidth (NVML's specification, never a measurement: load can
only make honest calls slower). A candidate whose median call beats that floor is HACK_DETECTED
(``gate``: GPU only, outputs over twice the L2, and only where the reference's own median call is
not below the floor).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from evalfarm.devices import DramPeak
from evalfarm.judge.blame import Verdicted
from evalfarm.result import Evidence, TimingEvidence
from evalfarm.verdict import Verdict


@dataclasses.dataclass(frozen=True)
class FloorFacts:
    """What the gate knows of the device and the task from the set-up."""

    output_bytes: int  # one call's outputs, unaligned
    l2_bytes: int | None  # None: unknown (or not a GPU)
    dram: DramPeak | None  # read only where the outputs exceed twice the L2


@dataclasses.dataclass(frozen=True)
class FloorCheck:
    """The physical-floor gate's arithmetic and what it concluded (``physical_floor``)."""

    applied: bool  # False: the gate could not say anything sound here (see note)
    violated: bool
    output_bytes: int
    l2_bytes: int | None
    peak_dram_bytes_s: float | None
    floor_us: float | None
    cand_time_us_median: float
    ref_time_us_median: float
    note: str = ""

    @property
    def reason(self) -> str:
        """The verdict's detail when violated."""
        if not self.violated or self.floor_us is None or self.peak_dram_bytes_s is None or self.l2_bytes is None:
            return ""
        return (f"guard physical_floor: the candidate's median call took {self.cand_time_us_median:.2f} us, less "
                f"than the {self.floor_us:.2f} us it takes to write its {self.output_bytes / 1e6:.1f} MB of "
                f"outputs at the device's peak DRAM bandwidth ({self.peak_dram_bytes_s / 1e12:.2f} TB/s; at most "
                f"the {self.l2_bytes / 1e6:.1f} MB L2 can hold the rest): the timing does not cover the work")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def physical_floor(output_bytes: int, l2_bytes: int | None, peak_dram_bytes_s: float | None,
                   cand_us: float, ref_us: float, peak_note: str = "") -> FloorCheck:
    """Is the candidate's median call shorter than writing its outputs can physically take?

    A correct call leaves every output byte written; at the end of the call at most the L2's
    worth of them can still sit in the (write-back) cache, so at least ``output_bytes - l2_bytes``
    went to DRAM, which takes at least that over the peak DRAM bandwidth. The bound is from the
    device's specification (NVML), never from a measurement, so load on the host or the device
    can only make honest calls slower, never the floor higher. It applies only when the outputs
    exceed twice the L2 (smaller outputs can live in cache) and when the reference's own median
    call is not below it (a reference that beats the floor returns views, or the bandwidth
    reading is wrong: either way the bound says nothing here). Equal to the floor is fine.
    """
    def skip(note: str, floor_us: float | None = None) -> FloorCheck:
        return FloorCheck(False, False, output_bytes, l2_bytes, peak_dram_bytes_s, floor_us, cand_us, ref_us, note)

    if l2_bytes is None or l2_bytes <= 0:
        return skip("not applied: L2 size unknown")
    if output_bytes <= 2 * l2_bytes:
        return skip(f"not applied: the outputs ({output_bytes} bytes) fit in twice the L2 ({l2_bytes} bytes)")
    if peak_dram_bytes_s is None or not peak_dram_bytes_s > 0 or not math.isfinite(peak_dram_bytes_s):
        return skip(f"not applied: peak DRAM bandwidth unknown ({peak_note or 'no NVML reading'})")
    floor_us = (output_bytes - l2_bytes) / peak_dram_bytes_s * 1e6
    if not ref_us >= floor_us:
        return skip(f"not applied: the reference's own median call ({ref_us:.2f} us) is below the floor "
                    f"({floor_us:.2f} us), so its outputs are not all written in the call", floor_us)
    violated = cand_us < floor_us
    return FloorCheck(True, violated, output_bytes, l2_bytes, peak_dram_bytes_s, floor_us, cand_us, ref_us,
                      peak_note)


def gate(facts: FloorFacts, timing: TimingEvidence, evidence: Evidence) -> None:
    """HACK_DETECTED when the median candidate call beats writing its outputs (GPU only); the
    check goes into ``evidence.physical_floor`` either way."""
    dram = facts.dram
    check = physical_floor(facts.output_bytes, facts.l2_bytes, dram.bytes_per_s if dram else None,
                           timing.cand_time_us_median, timing.ref_time_us_median, dram.note if dram else "")
    evidence.physical_floor = {**check.to_dict(), **(dram.to_dict() if dram else {})}
    if check.violated:
        evidence.guards.append(check.reason[len("guard "):])
        raise Verdicted(Verdict.HACK_DETECTED, check.reason)
