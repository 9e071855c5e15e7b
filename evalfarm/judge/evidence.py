"""The Evidence record: what a result says beside its verdict, and how it is put together.

The rule. Evidence reports; it never decides a verdict. Everything in it is either the judge's own
measurement or a worker's report kept as a note (bounded in size): the versions and the device's
clocks at the result, the isolation in force (``isolation``: the judge's notes on its protocol, then
the candidate worker's report, then the cgroup's), the timing evidence of an OK result
(``timing_evidence``, with the notes on its quiet-GPU waits and on the candidate's event times:
``timing_notes``) and where the evaluation's time went (``result``: phases, round phases, set-up
phases).
"""

from __future__ import annotations

import statistics
import subprocess
import time
from typing import Any

import torch

from evalfarm.devices import nvml_clocks
from evalfarm.infra_cause import InfraCause
from evalfarm.judge.blame import Verdicted
from evalfarm.judge.charges import Charges
from evalfarm.judge.correctness import BLOCK_NOTE
from evalfarm.judge.exchange import QUIET_NOTE_S, REFERENCE_POISON_ENV
from evalfarm.judge.lone_calls import WARM_NOTE
from evalfarm.judge.samples import RoundCounts, Samples
from evalfarm.judge.setup import cuda_identity
from evalfarm.judge.timed_blocks import TIMED_BLOCK_NOTE
from evalfarm.judge.worker_processes import _visible
from evalfarm.result import Evidence, ScoreResult, TimingEvidence
from evalfarm.timing import BucketStats
from evalfarm.verdict import Verdict

ISOLATION_NOTE = ("reference computed and timed in its own worker process; candidate process stopped "
                  "outside its own calls; inputs written right before each call")
# One note of a worker's isolation report is kept up to this many characters (bubblewrap's own
# note, the longest, is about 330).
ISOLATION_NOTE_CHARS = 500
# A candidate call that takes this many times longer by the synchronised clock than by events on
# its stream (and 50 us more) is noted: work on another stream or the host. A side stream doing the
# whole job measured 2.6x on an H100; an honest kernel is near 1.
EVENT_WALL_GAP_NOTE = 2.0


def versions() -> dict[str, str]:
    import platform

    from evalfarm import __version__

    return {"evalfarm": __version__, "torch": torch.__version__, "cuda": str(torch.version.cuda),
            "python": platform.python_version()}


def clocks(device: torch.device) -> dict[str, Any]:
    """The device's clocks, temperature and power at the result: NVML in this process, else one
    ``nvidia-smi`` call (bounded at 5 s)."""
    if device.type != "cuda":
        return {}
    try:
        read = nvml_clocks(*cuda_identity(torch.cuda.get_device_properties(device)))
    except RuntimeError:
        read = None
    if read is not None:
        return read
    try:
        idx = device.index or 0
        out = subprocess.run(
            ["nvidia-smi", f"--id={_visible(str(idx))}",
             "--query-gpu=clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw",
             "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=5)
        vals = [v.strip() for v in out.stdout.strip().split(",")]
        keys = ["sm_mhz", "mem_mhz", "max_sm_mhz", "temp_c", "power_w"]
        return dict(zip(keys, vals, strict=False)) if out.returncode == 0 else {}
    except (OSError, subprocess.TimeoutExpired):
        return {}


def isolation(report: dict[str, Any], blocks: bool, timed: bool, warm_calls: bool, reference_poison: bool,
              cgroup_notes: list[str]) -> list[str]:
    """``evidence.isolation``: the judge's notes on its protocol (``blocks``: correctness blocks;
    ``timed``: timed blocks), then the candidate worker's report (``report``, its ready message or
    its failure), then the cgroup's notes."""
    notes = report.get("isolation", [])
    if not isinstance(notes, list) or not all(isinstance(x, str) for x in notes):
        raise Verdicted(Verdict.HACK_DETECTED, "guard worker_protocol: malformed isolation report")
    own = [ISOLATION_NOTE, *([BLOCK_NOTE] if blocks else []),
           *([TIMED_BLOCK_NOTE] if timed else []),
           *([WARM_NOTE] if warm_calls and not timed else []),
           *([] if reference_poison else ["the reference worker's free memory not poisoned "
                                          f"(it runs no candidate code; {REFERENCE_POISON_ENV}=1 does)"])]
    return [*own, *(x[:ISOLATION_NOTE_CHARS] for x in notes[:16]), *cgroup_notes]


def timing_evidence(stats: BucketStats, stable: bool, samples: Samples, counts: RoundCounts, charges: Charges,
                    blocks: dict[str, Any] | None, timed: bool, seconds: float) -> TimingEvidence:
    """An OK result's timing evidence from the samples kept (``blocks``: BlockLog.summary())."""
    return TimingEvidence(
        rounds=stats.rounds, bucket_means=stats.bucket_means, bucket_variance=stats.relative_variance,
        ci_low=stats.ci_low, ci_high=stats.ci_high, stable=stable, remeasured=counts.remeasured,
        raw_speedup=stats.score,
        ref_time_us_median=statistics.median(samples.t_ref) / 1e3,
        cand_time_us_median=statistics.median(samples.t_cand) / 1e3,
        audited_rounds=counts.audited, seconds=seconds, set_aside_rounds=counts.set_aside,
        block_rounds=counts.in_blocks, blocks=blocks, warm_call_rounds=samples.warm_call_rounds,
        pre_call_ref_us_median=statistics.median(samples.pre_ref) / 1e3,
        pre_call_cand_us_median=statistics.median(samples.pre_cand) / 1e3, pre_call_charge_us=charges.pre / 1e3,
        untimed_ref_us_median=statistics.median(samples.untimed_ref) / 1e3,
        untimed_cand_us_median=statistics.median(samples.untimed_cand) / 1e3,
        exchange_charge_us=charges.exchange / 1e3,
        exchange_excess_us=charges.excess / 1e3,
        protocol="blocks" if timed else "lone", timed_block_rounds=counts.timed_block_rounds,
        tail_ref_us_median=statistics.median(samples.tails_ref) / 1e3 if samples.tails_ref else None,
        tail_cand_us_median=statistics.median(samples.tails_cand) / 1e3 if samples.tails_cand else None,
    )


def timing_notes(timing: TimingEvidence, samples: Samples, quiet_waits: list[float]) -> list[str]:
    """The notes on the reference's quiet-GPU waits over QUIET_NOTE_S and on the candidate's calls
    against its CUDA events; fills in ``timing``'s event fields where the workers recorded events."""
    notes = []
    if quiet_waits:
        notes.append(
            f"gpu_quiet_wait: the reference waited more than {QUIET_NOTE_S * 1e3:g} ms for the GPU to go quiet "
            f"before {len(quiet_waits)} call(s) (longest {max(quiet_waits) * 1e3:.1f} ms): work left "
            "running after the candidate's calls returned")
    if samples.e_cand:
        timing.ref_event_us_median = statistics.median(samples.e_ref)
        timing.cand_event_us_median = statistics.median(samples.e_cand)
        if timing.cand_event_us_median > 0:
            timing.event_wall_gap = timing.cand_time_us_median / timing.cand_event_us_median
            if timing.event_wall_gap > EVENT_WALL_GAP_NOTE and timing.cand_time_us_median - timing.cand_event_us_median > 50:
                notes.append(
                    f"event_wall_gap: the candidate's calls take {timing.event_wall_gap:.1f}x longer by the "
                    "device-synchronised clock than by CUDA events on the current stream (work on other "
                    "streams or the host); the score uses the synchronised clock")
    return notes


def result(evidence: Evidence, verdict: Verdict, speedup: float | None, detail: str, task_name: str,
           device: torch.device, phases: dict[str, float], round_phases: dict[str, float],
           setup_phases: dict[str, float], cause: InfraCause = InfraCause.OTHER) -> ScoreResult:
    """The result: where the time went into ``evidence.phases_s``, the device's clocks read now."""
    evidence.phases_s.update(phases)
    if any(round_phases.values()):
        evidence.phases_s.update({k: round(v, 4) for k, v in round_phases.items()})
    evidence.phases_s.update({k: round(v, 4) for k, v in setup_phases.items()})
    t_clocks = time.monotonic()
    evidence.clocks = clocks(device)
    evidence.phases_s["clocks"] = round(time.monotonic() - t_clocks, 4)
    return ScoreResult(verdict=verdict, speedup=speedup if verdict is Verdict.OK else None,
                       detail=detail, evidence=evidence, task=task_name,
                       infra_cause=cause if verdict is Verdict.INFRA_ERROR else "")
