"""The physical floor: no correct candidate can return faster than it can write its outputs.

A call must leave every output element in memory, so its wall time is at least
``output_bytes / write_rate``. The judge measures the device's copy rate for a buffer of the
output's size (so caches that a buffer of that size fits in count in the candidate's favour),
and allows a write rate of ``WRITE_RATE_FACTOR`` times that (a copy reads as much as it writes;
a pure write could use both halves) times a further ``SAFETY`` margin. A candidate whose median
call is faster than that floor did not compute its outputs in the call: the timing was cut
short, or the outputs were produced elsewhere. Anything that makes the measured copy rate lower
(a busy device, sync overhead in small copies) only lowers the floor, never raises it.

A floor from FLOPs is deliberately not used: candidates may legitimately do fewer FLOPs than the
reference (reassociation, skipping redundant work), so the reference's FLOP count bounds
nothing.
"""

from __future__ import annotations

import dataclasses
import time

import torch

WRITE_RATE_FACTOR = 2.0
SAFETY = 2.0
MIN_PROBE_BYTES = 1 << 20
MAX_PROBE_BYTES = 256 << 20
PROBE_REPEATS = 5


@dataclasses.dataclass(frozen=True)
class Floor:
    output_bytes: int
    copy_rate_bytes_s: float  # best measured copy rate for a buffer of the probe size
    probe_bytes: int

    @property
    def seconds(self) -> float:
        """The least time a correct call can take: writing its outputs at the allowed rate."""
        return self.output_bytes / (self.copy_rate_bytes_s * WRITE_RATE_FACTOR * SAFETY)

    def violated_by(self, call_seconds: float) -> bool:
        return self.output_bytes > 0 and call_seconds < self.seconds

    def to_dict(self) -> dict[str, float]:
        return {
            "output_bytes": self.output_bytes,
            "copy_rate_gb_s": round(self.copy_rate_bytes_s / 1e9, 3),
            "probe_bytes": self.probe_bytes,
            "floor_us": round(self.seconds * 1e6, 4),
        }

    def explain(self, call_seconds: float) -> str:
        return (
            f"guard physical_floor: the candidate's median call took {call_seconds * 1e6:.2f} us, less than "
            f"writing its {self.output_bytes / 1e6:.3f} MB of outputs can take on this device "
            f"({self.seconds * 1e6:.2f} us at {WRITE_RATE_FACTOR * SAFETY:g}x the measured copy rate of "
            f"{self.copy_rate_bytes_s / 1e9:.1f} GB/s): the outputs were not computed in the timed call"
        )


def measure_copy_rate(device: torch.device, nbytes: int, repeats: int = PROBE_REPEATS) -> tuple[float, int]:
    """(best copy rate in bytes/s, probe size) for a device-to-device copy of about `nbytes`."""
    probe = int(min(max(nbytes, MIN_PROBE_BYTES), MAX_PROBE_BYTES))
    src = torch.empty(probe, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    best = float("inf")
    dst.copy_(src)  # warm-up: first touch, allocator, kernel load
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        dst.copy_(src)
        sync()
        best = min(best, time.perf_counter() - t0)
    del src, dst
    return probe / max(best, 1e-9), probe


def physical_floor(device: torch.device, output_bytes: int) -> Floor:
    rate, probe = measure_copy_rate(device, output_bytes)
    return Floor(output_bytes=output_bytes, copy_rate_bytes_s=rate, probe_bytes=probe)
