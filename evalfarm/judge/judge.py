"""The trusted judge: owns the inputs, the reference outputs and the verdict.

Started per evaluation as ``python -m evalfarm.judge.launch FD --device D`` (by
``evalfarm.judge.standby``, often before the evaluation is known), whose launcher starts two fresh
workers (``evalfarm.judge.worker``) before it imports this module; the judge then warms its
device and waits for its one request. The workers are a
*reference* worker that runs the task's Model and nothing else, and a *candidate* worker that
runs ModelNew. The reference
is computed and timed in a process where the candidate's code never runs, so nothing the
candidate sets in its own process (global flags, hooks, patched torch functions, thread
counts) can change it.

Each round, in random order, the judge asks each worker to prepare a call (poison free
memory, demote persisting L2 lines, synchronise), then writes that round's fresh inputs into
the worker's input slots, then lets the call run (the worker flushes the L2 and synchronises
right before it): the inputs reach the candidate's memory only right before its timed call
starts. That last flush-and-sync is the only untimed moment the candidate could use them in;
when its median takes longer in the candidate's process than in the reference's, the excess is
added to every candidate call (``TimingEvidence.pre_call_charge_us``). The judge also times each
whole exchange with its own clock: what it saw beyond the call the candidate's process reported
(a patched clock, work after the call) is compared with the reference's; the excess is reported
(``TimingEvidence.exchange_excess_us``) and charged the same way where
``ScoreConfig.exchange_charged`` (by default on a GPU). The candidate's process group is stopped
(SIGSTOP) whenever its own call is not under way, so it cannot compute ahead, or compete with the reference,
while the reference runs; on a GPU, the reference worker also waits until no other work is
running on the device before its call. Every correctness round and a random share of timed
rounds is checked here against the reference worker's output of the same round.

Preparation ahead (``PREPARE_AHEAD_ENV``, on unless "0"): each worker prepares its next call right
after replying for the last one, and the judge stops it only once it says it is prepared; a lone
call then needs no "prepare" exchange of its own, and its round goes with "go" (on a GPU, the judge
itself waits for a quiet GPU before it writes a reference call's inputs, evalfarm.judge.quiet).
That saves a round trip, two stop/continue signals and, on a GPU, a switch of the device to the
worker's context and back per call; the order of what happens in the worker's process, and what it
can see when, is unchanged (the worker is stopped in between). Shorter still, each the operator's
switch (GO_FIRST_ENV, JUDGE_SPIN_ENV, ROUND_WRITE_ENV, REFERENCE_POISON_ENV): the "go" queued before
the worker continues, the judge spinning briefly for replies on a GPU, a lone round's inputs written
into both (prepared, stopped) workers at once, and no poisoning in the reference worker.

On a GPU the candidate's clock is also checked against the CUDA events its worker records inside
each timed call (``clock_behind_events``): a call cannot take less by the clock around it than by
the events within it, so a median round behind its events means a tampered clock (HACK_DETECTED).

Correctness blocks (``ScoreConfig.correctness_block``, on by default): the correctness rounds
after the warm-up run a batch at a time, one exchange per worker per batch (``Judge._run_block``)
instead of one per call, since the exchange costs more than a small kernel's call (about 2.3 ms
per call on an H100). Those rounds are checked exactly as others; their times are never used
for the score, which comes from the per-call rounds after correctness.

Warm calls (``ScoreConfig.warm_call``, by default on a CPU only): before a lone timed call whose
reference runs under ``WARM_CALL_MAX_S``, both workers first call their model once, untimed, on the
first inputs they were given, before the round's inputs are written; bounded as a call is. A call
that follows the judge's exchange runs slower than one that follows another call, on both sides,
which compresses short calls' ratios (docs/security.md, "Warm calls").
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
import os
import random
import secrets
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback
from typing import Any

import torch

from evalfarm import bubblewrap, lifetime, sandbox
from evalfarm.compare import Comparison, compare_outputs, flatten_output
from evalfarm.config import ScoreConfig
from evalfarm.devices import DramPeak, dram_peak, nvml_clock_reader, nvml_clocks
from evalfarm.infra_cause import InfraCause
from evalfarm.judge import diagnose, extension_facts, gpu_lease, precision, roofline, wire
from evalfarm.judge.arena import Arena, aligned
from evalfarm.judge.audits import AuditSchedule
from evalfarm.judge.inputs import InputSource
from evalfarm.judge.memory_plan import MemoryGate, TaskTooLarge, out_of_memory_reason, warm_meta
from evalfarm.judge.quiet import QUIET_WAIT_S, QuietProbe
from evalfarm.judge.roles import CANDIDATE, EXT_DIR, PROFILE_DIR, REFERENCE
from evalfarm.judge.round_trace import RoundTrace
from evalfarm.judge.staging import JudgeStaging, StagingLayout
from evalfarm.judge.state import set_clean_state
from evalfarm.judge.task_facts import valid_footprint
from evalfarm.judge.timed_blocks import (
    MIN_BLOCK_CALLS,
    STAGING_MAX_BYTES,
    WARMUP_CALLS,
    MessageSignals,
    WordSignals,
    judge_windows_ns,
    release_calls,
    tail_charge_ns,
    tail_share_ns,
)
from evalfarm.judge.worker import data_span, overlaps, storage_span
from evalfarm.judge.workers import StartedWorkers, WorkerHandle, _visible, start_workers
from evalfarm.result import Evidence, ScoreResult, TimingEvidence
from evalfarm.tasks.format import Task, instantiate_task
from evalfarm.tasks.lint import degenerate_reason
from evalfarm.timing import bucket_stats, conservative_round, decide
from evalfarm.verdict import Verdict

log = logging.getLogger("evalfarm.judge")

ARENA_BUDGET_BYTES = {"cpu": 256 << 20, "cuda": 1 << 30}
MAX_ROUNDS_PER_BATCH = 32
# Correctness blocks only where a batch holds at least this many rounds (tasks whose inputs and
# outputs are small). A block saves all but one of its exchanges per worker, but its rounds give
# no timing samples, which the one-call correctness rounds do. On an H100, L1/1 at its default
# size (256 MiB per round, 2 rounds per batch) spent 6.5 s on 1000 correctness inputs in blocks
# against 7.3 s without, and its fast variants then needed the whole timing budget for samples the
# correctness rounds had given before (docs/benchmarks.md, "Correctness blocks").
MIN_BLOCK_ROUNDS = 8
ROUND_SLACK_S = 2.0
# Warm calls (ScoreConfig.warm_call): only where the reference's call is estimated under this. A
# lone call pays ~15-25 us for following the judge's exchange rather than another call, which is
# 3% of a 1 ms call; a warm call costs each worker one more call per round.
WARM_CALL_MAX_S = 1e-3
MAX_REMEASURES = 2
# Preparation ahead: a worker prepares its next call (poisoning, L2 reset, synchronisation) right
# after replying for the last one, and the judge sends a lone call's round with "go", with no
# "prepare" round trip of its own (two stop/continue signals, and on a GPU a switch of the device to
# the worker's context and back, fewer per call). "0" in the judge's environment turns it off.
PREPARE_AHEAD_ENV = "EVALFARM_PREPARE_AHEAD"
# Ways to shorten an exchange further, each the operator's switch in the judge's environment
# (docs/benchmarks.md, "Shortening the exchange"):
# * GO_FIRST_ENV (on unless "0"): the judge queues a "go" before it continues the stopped worker,
#   so the worker's read, restarted by the SIGCONT, finds it at once (one wake-up instead of two);
# * JUDGE_SPIN_ENV (microseconds; DEFAULT_JUDGE_SPIN_US unless set, "0" none): the judge polls for a
#   worker's reply without sleeping for up to this long before it blocks (on a GPU only; it keeps
#   one host core busy meanwhile);
# * ROUND_WRITE_ENV (on unless "0"): where both workers prepared ahead, a lone round's inputs are
#   written into both workers' slots at once, in its first exchange (one switch of the device to
#   the judge's context and one synchronisation fewer per round);
# * REFERENCE_POISON_ENV (off unless "1"): the reference worker, which runs no candidate code, skips
#   the free-memory poisoning in its preparation (the candidate's is the operator's POISON_ENV, as
#   before); "1" poisons there too.
GO_FIRST_ENV = "EVALFARM_GO_FIRST"
JUDGE_SPIN_ENV = "EVALFARM_JUDGE_SPIN_US"
ROUND_WRITE_ENV = "EVALFARM_ROUND_WRITE"
REFERENCE_POISON_ENV = "EVALFARM_REFERENCE_POISON"
DEFAULT_JUDGE_SPIN_US = 2000
# A standby judge's host warm-up (warm_host: PyTorch's meta kernels, which import torch._dynamo, 5-7 s
# of one core on the GPU hosts) only where this is "1". Off by default: a standby taken while it
# runs shares its interpreter with the evaluation's rounds (docs/benchmarks.md, "Shortening the
# exchange": such evaluations spent up to twice as long on correctness on an H200), and the meta
# pass it pays for is needed only by the first judge of a task (evalfarm.judge.task_facts).
META_WARMUP_ENV = "EVALFARM_STANDBY_META_WARMUP"
# A worker's preparation for a call (poisoning free memory, the L2 flush, and on the reference's
# side waiting for a quiet GPU) is bounded by this.
PREPARE_TIMEOUT_S = 60.0
# Noise allowed between the two workers' pre-call moments before the excess is charged.
PRE_CALL_SLACK_NS = 10_000
# Noise allowed between the two workers' judge-timed leftovers before the excess is charged: this
# much plus this share of the reference's median leftover.
EXCHANGE_SLACK_NS = 10_000
EXCHANGE_SLACK_FRACTION = 0.1
# ... and this share of the candidate's own median call (what its memory traffic leaves behind,
# dirty cache lines written back after it returns, is not charged up to this much).
EXCHANGE_SLACK_CALL_FRACTION = 0.05
# A reference call that had to wait longer than this for a quiet GPU is noted in the evidence.
QUIET_NOTE_S = 2e-3
# A candidate call that takes this many times longer by the synchronised clock than by events on
# its stream (and 50 us more) is noted: work on another stream or the host. A side stream doing the
# whole job measured 2.6x on an H100; an honest kernel is near 1.
EVENT_WALL_GAP_NOTE = 2.0
# A synchronised call's time by the worker's clock encloses the CUDA events recorded inside it on its
# stream: where the candidate's calls (median of the rounds' differences) took more by events than
# by the clock, beyond this slack (and this share of the event time), the clock was tampered with.
CLOCK_BEHIND_EVENTS_SLACK_US = 20.0
CLOCK_BEHIND_EVENTS_FRACTION = 0.1
# The input index of the profiled call (--profile): never one of the rounds' (0, 1, ...) or the
# judge's own set-up calls (-1, -2, -3), so it is fresh to the candidate.
PROFILE_INPUT_INDEX = -4
# Likewise for the call profiled for the share of GPU time in the candidate's own kernels.
KERNELS_INPUT_INDEX = -5
PROFILE_TIMEOUT_S = 120.0
# How long the judge waits for its owner's go (no standby judge of the same device still starting
# up), counted from its first round; past that it goes on.
BEFORE_ROUNDS_TIMEOUT_S = 30.0
ISOLATION_NOTE = ("reference computed and timed in its own worker process; candidate process stopped "
                  "outside its own calls; inputs written right before each call")
# Added to the isolation notes when the evaluation has correctness blocks.
BLOCK_NOTE = ("correctness rounds after the warm-up run in blocks (one exchange per worker per batch of "
              "rounds): a block's inputs are all written before it starts, so its times are never used "
              "for the score; every output is checked")

# Added to the isolation notes when the timed rounds run in timed blocks (evalfarm.judge.timed_blocks).
TIMED_BLOCK_NOTE = ("timed rounds run in blocks: each worker's calls queued back to back, each call's fresh inputs "
                    "released by the judge only after the previous call finished; a random share of every block's "
                    "calls checked; each call's reported time compared with the judge's own clock")

# Added to the isolation notes when the evaluation has warm calls (ScoreConfig.warm_call).
WARM_NOTE = ("each timed call whose reference is under 1 ms follows, in both workers, one untimed call of the "
             "same model on the first inputs that worker was given, made before the call's inputs are written")


class RoundsHold:
    """The owner's "go" for timed rounds: asked for once, before the first round. The owner
    answers "go" at once when no standby judge of this device is starting up, else "hold" and
    then "go" when the start-up is over (its CUDA contexts and imports must not compete with
    calls whose times count). Rounds run while held are checked as usual, but their times are
    set aside; the judge waits for the go only when it has no other work left (correctness
    done), and at most BEFORE_ROUNDS_TIMEOUT_S from the question, after which it goes on."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._asked_at = 0.0
        self._go = False

    def ask(self) -> None:
        wire.send_json(self._conn, {"op": "before_rounds"})
        self._asked_at = time.monotonic()
        self._receive(BEFORE_ROUNDS_TIMEOUT_S)  # "go" or "hold", at once

    def released(self, wait: bool = False) -> bool:
        """True once the owner said go (or the bounded wait for it ran out); with ``wait``, block
        until then, else only look."""
        if not self._go:
            left = BEFORE_ROUNDS_TIMEOUT_S - (time.monotonic() - self._asked_at)
            self._receive(max(left, 0.0) if wait else 0.0)
            if wait or left <= 0:
                self._go = True  # the owner is slow to answer: go on rather than stall the evaluation
        return self._go

    def _receive(self, timeout_s: float) -> None:
        try:
            reply = wire.recv_json(self._conn, timeout_s)
        except TimeoutError:
            return
        if reply.get("op") not in ("go", "hold"):
            raise wire.ProtocolError(f"expected go or hold, got {str(reply.get('op'))[:40]!r}")
        self._go = reply["op"] == "go"


class Verdicted(Exception):
    """Ends an evaluation early with a verdict."""

    def __init__(self, verdict: Verdict, detail: str, cause: InfraCause = InfraCause.OTHER) -> None:
        super().__init__(detail)
        self.verdict = verdict
        self.detail = detail
        self.cause = cause  # an INFRA_ERROR's cause (evalfarm.infra_cause)


@dataclasses.dataclass
class Call:
    """One worker's part of a round: where its inputs and outputs live, and the message that starts it."""

    in_slots: list[Any]  # Slot or None (a non-tensor argument)
    out_slots: list[Any]
    prepare: dict[str, Any]


@dataclasses.dataclass
class RoundPlan:
    r: int
    first: str  # REFERENCE or CANDIDATE: whose call runs first this round
    audited: bool
    inputs: list[Any]  # the judge's own copies (pristine)
    calls: dict[str, Call]
    times: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    warm_call: bool = False  # both workers call their model once, untimed, on earlier inputs first
    block_call: int | None = None  # its place in a timed block (evalfarm.judge.timed_blocks); None: not in one


# One note of a worker's isolation report is kept up to this many characters (bubblewrap's own
# note, the longest, is about 330).
ISOLATION_NOTE_CHARS = 500


def _versions() -> dict[str, str]:
    import platform

    from evalfarm import __version__

    return {"evalfarm": __version__, "torch": torch.__version__, "cuda": str(torch.version.cuda),
            "python": platform.python_version()}


def _clocks(device: torch.device) -> dict[str, Any]:
    """The device's clocks, temperature and power at the result: NVML in this process, else one
    ``nvidia-smi`` call (bounded at 5 s)."""
    if device.type != "cuda":
        return {}
    try:
        read = nvml_clocks(*_cuda_identity(torch.cuda.get_device_properties(device)))
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


def _tensors_bytes(values: list[Any]) -> int:
    return sum(aligned(v.numel() * v.element_size()) for v in values if isinstance(v, torch.Tensor))


def _check_ref_output(out: Any) -> None:
    for o in flatten_output(out):
        if not isinstance(o, torch.Tensor):
            raise Verdicted(Verdict.INFRA_ERROR, f"the task's Model returned {type(o).__name__}, not tensors")


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


def _cuda_identity(props: Any) -> tuple[str | None, tuple[int, int, int] | None]:
    """(UUID, (PCI domain, bus, device)) of a CUDA device as the runtime reports it; None where unknown."""
    uuid = None
    raw = getattr(props, "uuid", None)
    if raw is not None:
        text = str(raw)
        bare = text[4:] if text.startswith(("GPU-", "MIG-")) else text
        if len(bare) == 36 and all(c in "0123456789abcdefABCDEF-" for c in bare):
            uuid = text
    pci = None
    try:
        pci = (int(props.pci_domain_id), int(props.pci_bus_id), int(props.pci_device_id))
    except (AttributeError, TypeError, ValueError):
        pass
    return uuid, pci


def warm_device(device: str) -> str:
    """Create this process's CUDA context now, while no evaluation waits for it; "" or a note."""
    if not device.startswith("cuda"):
        return ""
    try:
        dev = torch.device("cuda:0" if device == "cuda" else device)
        torch.cuda.set_device(dev)
        torch.randn(16, device=dev)  # the context, and the device's random generator
    except Exception as err:  # noqa: BLE001 - the evaluation reports the device's failure itself
        return f"device not warmed: {type(err).__name__}: {err}"
    return ""


def warm_host(device: str) -> threading.Thread | None:
    """Host-only warm-up, started after the standby announced itself ready: the memory plan's
    shape-only pass (MemoryGate.before_setup, on a GPU only) pays PyTorch's lazily imported
    meta kernels in a process's first call (5-7 s on the H100 host, torch._dynamo among them).
    It runs in a thread of its own, on one CPU core and never on the device, so neither the
    owner's running evaluation nor this judge's own request waits for it: a request that comes
    first is read at once, and its shape-only pass finds the imports done or joins them (Python's
    import lock). The thread, or None off the GPU."""
    if not device.startswith("cuda"):
        return None

    def run() -> None:
        try:
            warm_meta()
        except Exception as err:  # noqa: BLE001 - only a warm-up: the evaluation pays it instead
            log.info("meta warm-up failed: %s: %s", type(err).__name__, err)

    thread = threading.Thread(target=run, name="evalfarm-meta-warm-up", daemon=True)
    thread.start()
    return thread


def host_warm_up(device: str, setting: str) -> Any:
    """What a standby runs once it has announced itself ready: ``warm_host`` where the operator
    asked for it (META_WARMUP_ENV "1"), else nothing (None)."""
    return (lambda: warm_host(device)) if setting.strip() == "1" else None


def wait_for_request(conn: Any, started: StartedWorkers | None, timeout_s: float,
                     after_ready: Any = None) -> dict[str, Any] | None:
    """Wait for the evaluation request; meanwhile, once both workers report that they started,
    tell the owner ``{"op": "standby_ready"}`` (its evaluations hold their timed rounds until
    their device's standbys are ready, so no start-up on the device competes with them) and
    then run ``after_ready()`` (host-only warm-up, which nobody is held for). None: no request
    came within ``timeout_s``, the owner went away, or a worker died while standing by."""
    from multiprocessing.connection import wait

    deadline = time.monotonic() + timeout_s
    workers = started.workers if started is not None else []
    by_conn = {w.conn: w for w in workers}
    announced = False
    while True:
        waiting = [w.conn for w in workers if not w.started_seen]
        if not waiting and not announced:
            # When (CLOCK_MONOTONIC is one clock for the host): the owner's start-up figures.
            wire.send_json(conn, {"op": "standby_ready", "at": time.monotonic(), "main_at": MAIN_AT[0]})
            announced = True
            if after_ready is not None:
                after_ready()
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        for ready in wait([conn, *waiting], left):
            if ready is conn:
                try:
                    return wire.recv_json(conn, 0)
                except (wire.PeerClosed, wire.ProtocolError, TimeoutError):
                    return None
            try:
                by_conn[ready].note_started(wire.recv_json(ready, 0))
            except (wire.PeerClosed, wire.ProtocolError, TimeoutError):
                return None  # a worker died before any evaluation: this judge is of no use


class Judge:
    def __init__(self, request: dict[str, Any], report_pgid: Any, started: StartedWorkers | None = None,
                 hold: RoundsHold | None = None, notify: Any = None) -> None:
        self.config = ScoreConfig.from_dict(request["config"])
        self.task = Task(name=request["task_name"], source=request["task_source"],
                         size_profiles=request.get("size_profiles") or {})
        self.candidate_source = request["candidate_source"]
        self.cache_dir = request["cache_dir"]
        self.expected_extensions = request.get("expected_extensions") or {}
        # Calls the build pool failed to build: the worker's load_inline raises these (evalfarm.build.hook).
        self.failed_extensions = request.get("failed_extensions") or {}
        self._extension_files: list[str] = []  # the .so files the candidate loaded (_check_symbols)
        self.arch = request["arch"]
        # What an earlier judge of this task measured (evalfarm.judge.task_facts); never seed- or
        # candidate-dependent, and checked before use.
        facts = request.get("task_facts")
        self.task_facts: dict[str, Any] = facts if isinstance(facts, dict) else {}
        self.report_pgid = report_pgid
        self.device = torch.device("cuda:0" if self.config.device == "cuda" else self.config.device)
        self.evidence = Evidence(device=str(self.device), versions=_versions())
        self.phases: dict[str, float] = {}
        # Where the rounds' time goes (correctness and timing together), so a slow evaluation
        # shows whether drawing inputs, the worker exchange, the timed calls or the audits cost it:
        # rounds_inputs (draws, arena slots, poisoning), rounds_exchange (prepare, inputs written,
        # go, result: the calls included), rounds_calls (the workers' timed calls alone),
        # rounds_audit (output comparison and input checks). The exchange, split: rounds_prepare
        # (the worker's preparation, round trip included), of which rounds_poison (its poisoning
        # of free memory and L2 reset) and rounds_quiet (the reference's quiet-GPU wait);
        # rounds_write (the inputs written and synchronised); rounds_go (go to result: the call,
        # the worker's output checks and the reply; for a correctness block, all of its calls and
        # the worker's preparations between them; for a timed block, all of its calls with the judge's
        # input writes between them).
        self.round_phases: dict[str, float] = dict.fromkeys(
            ("rounds_inputs", "rounds_exchange", "rounds_calls", "rounds_audit", "rounds_prepare",
             "rounds_poison", "rounds_quiet", "rounds_write", "rounds_go"), 0.0)
        # Likewise the judge's set-up, split where a GPU might spend it: setup_device (device
        # selection, clean state), setup_task (the task module, its init inputs, the reference
        # model built), setup_reference (its first two calls and their facts), setup_lint (the
        # degenerate-output check), setup_roofline (one call's FLOPs counted), setup_precision (the
        # precision gate's float64 ground truths), setup_arenas (memory plan and input/output
        # arenas) and setup_device_facts (device properties, the DRAM peak from NVML).
        self.setup_phases: dict[str, float] = {}
        self.rng = random.Random(secrets.randbits(64))
        self.degenerate = ""
        self._stopped: set[str] = set()
        # A second, correctness-only evaluation (evalfarm.other_sizes): no timing, no speedup.
        self.correctness_only = bool(request.get("correctness_only"))
        self.diagnostics = diagnose.Diagnostics.from_dict(request.get("diagnostics"))
        self._tmp = ""
        self._staged = ""  # StartedWorkers.staged_cache: what the candidate worker may load, read-only
        self._cgroup_notes: list[str] = []
        self._started = started
        # RoundsHold (or None: nothing to wait for): times count only from the owner's go.
        self._hold = hold
        # notify(msg): tells the owner of a wait that is not the candidate's (the GPU lease), and
        # of each phase as it starts ({"op": "phase", "phase": "load" | "correctness" | "timing"}).
        self._notify = notify
        self._lease: gpu_lease.GpuLease | None = None
        self.block_rounds = correctness_block_rounds(self.config)
        self.block_log = BlockLog()  # how the blocks' calls went, per worker: evidence only
        self.trace = RoundTrace.from_env()  # an operator's diagnostic (evalfarm.judge.round_trace)
        self.prepare_ahead = os.environ.get(PREPARE_AHEAD_ENV, "1") != "0"
        self.go_first = os.environ.get(GO_FIRST_ENV, "1") != "0"
        self.round_write = self.prepare_ahead and os.environ.get(ROUND_WRITE_ENV, "1") != "0"
        self.reference_poison = os.environ.get(REFERENCE_POISON_ENV, "0") == "1"
        self.spin_s = judge_spin_s(os.environ.get(JUDGE_SPIN_ENV, ""), self.device.type)
        self._ready: set[str] = set()  # workers that prepared their next call after their last reply
        self._quiet_probe: QuietProbe | None = None  # the judge's own (_judge_waits_quiet), GPU only
        # Timed blocks (evalfarm.judge.timed_blocks): decided in the set-up, confirmed by both workers'
        # gates; the judge's side of each worker's staging area, and the last sequence number used.
        self.timed = False
        self.staging: dict[str, JudgeStaging] = {}
        self._staging_areas: dict[str, Arena] = {}
        self.staging_layout: StagingLayout | None = None
        self._seq = 0
        # The precision gate (evalfarm.judge.precision) and one call's counts for the roofline
        # (evalfarm.judge.roofline), both from the set-up (_setup_precision).
        self.precision_gate: precision.PrecisionGate | None = None
        self.roofline_counts: roofline.Counts | None = None

    # --- the evaluation ---------------------------------------------------------------
    def run(self) -> ScoreResult:
        started = self._started
        scratch = self.config.file_size_limit_bytes
        if started is not None and not started.fits(self.config.device, scratch):
            started.close()  # started for another device or sandbox: not usable for this request
            sandbox.wipe(started.tmp)
            started = None
        if started is None:
            try:
                started = start_workers(self.config.device, self.report_pgid, scratch)
            except bubblewrap.SandboxUnavailable as err:
                return self._result(Verdict.INFRA_ERROR, None, str(err))
        tmp = self._tmp = started.tmp
        self._staged = started.staged_cache
        workers = started.workers
        arenas: list[Arena] = []
        try:
            self.ref, self.cand = workers
            self._take_gpu_lease()
            result = self._evaluate(tmp, arenas)
        except Verdicted as v:
            if self.diagnostics.profile_dir:
                self.evidence.diagnostics["profile"] = {"note": f"not profiled: the verdict is {v.verdict.value}"}
            result = self._result(v.verdict, None, v.detail, v.cause)
        finally:
            t_end = time.monotonic()
            self._resume_all()
            for w in workers:
                w.close()
            for a in arenas:
                a.close()
            lifetime.kill_descendants()  # the judge is a child subreaper: orphans of the workers end up here
            if self._lease is not None:  # after the workers are gone, so nothing of theirs runs on
                self._lease.release()
            sandbox.wipe(tmp)
        # Workers killed and reaped (their CUDA contexts destroyed), lease released, files wiped.
        result.evidence.phases_s["teardown"] = round(time.monotonic() - t_end, 4)
        if self.trace is not None:
            self.trace.write()
        return result

    def _phase(self, name: str) -> None:
        """Tell the owner a phase starts (progress for a person watching; never used for the score)."""
        if self._notify is not None:
            self._notify({"op": "phase", "phase": name})

    def _take_gpu_lease(self) -> None:
        """Hold this GPU alone for the whole evaluation (evalfarm.judge.gpu_lease): from before the
        reference's first call to after the workers are killed. The owner is told of a wait, so
        it is not charged to the candidate."""
        if self.device.type != "cuda":
            return
        uuid, pci = _cuda_identity(torch.cuda.get_device_properties(self.device))
        gpu = uuid or (f"pci-{pci[0]:04x}-{pci[1]:02x}-{pci[2]:02x}" if pci is not None
                       else f"visible-{os.environ.get('CUDA_VISIBLE_DEVICES', '0')}")

        told: list[str] = []

        def waiting(holders: str) -> None:
            told.append(holders)
            log.info("waiting for GPU %s: leased by %s", gpu, holders)
            if self._notify is not None:
                self._notify({"op": "gpu_lease_wait", "holders": holders})

        try:
            self._lease = gpu_lease.acquire(gpu, self.config.gpu_lease_timeout_s, on_wait=waiting)
        except gpu_lease.LeaseTimeout as err:
            raise Verdicted(Verdict.INFRA_ERROR, str(err)) from None
        except OSError as err:
            raise Verdicted(Verdict.INFRA_ERROR, f"the GPU lease file could not be opened: {err} (set "
                            f"${gpu_lease.LEASE_DIR_ENV} to a directory every evaluation on this host can use)") from None
        if told and self._notify is not None:  # the owner's clock resumes
            self._notify({"op": "gpu_lease", "waited_s": self._lease.waited_s})
        self.phases["gpu_lease_wait"] = round(self._lease.waited_s, 4)

    def _evaluate(self, tmp: str, arenas: list[Arena]) -> ScoreResult:
        cfg = self.config
        t0 = time.monotonic()
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
            self.evidence.device_name = torch.cuda.get_device_name(self.device)
        else:
            from evalfarm.devices import cpu_name

            self.evidence.device_name = cpu_name()
        num_threads = torch.get_num_threads()
        set_clean_state(num_threads)
        torch.set_grad_enabled(False)
        mark = self._setup_clock(t0)
        mark("setup_device")
        profile = self.task.resolve_profile(cfg.size_profile, self.device.type)
        self.evidence.size_profile = profile
        self.memory = MemoryGate(self.device)
        try:
            task_mod = instantiate_task(self.task, profile)
            self.source = InputSource(task_mod, str(self.device))
            init_inputs = self.source.init_inputs()
            # TaskTooLarge before anything large exists
            self.memory.before_setup(task_mod, init_inputs, valid_footprint(self.task_facts.get("footprint")))
            weight_seed = self.source.weight_seed()
            torch.manual_seed(weight_seed)
            ref_model = task_mod.Model(*init_inputs).to(self.device)
            mark("setup_task")
            # Lean for full-size tasks (memory_plan.setup_bytes): at most two input sets and one
            # kept output at a time; the same inputs are drawn again rather than cloned.
            sample = self.source.inputs(-1)
            held, _ = self._ref_call(ref_model, sample)
            again = self.source.inputs(-1)
            self.ref_mutates_inputs = any(
                isinstance(a, torch.Tensor) and not torch.equal(a, b) for a, b in zip(sample, again, strict=False))
            del sample
            ref_out, t_ref = self.memory.measured_call(
                lambda m=ref_model, s=again: self._ref_call(m, s))  # second call: warm
            facts = reference_alias_facts(held, ref_out, again)
            del held, again
            _check_ref_output(ref_out)
            self.tuple_out = isinstance(ref_out, tuple | list)
            self.out_struct = [(tuple(o.shape), o.dtype) for o in flatten_output(ref_out)]
            del ref_out
            mark("setup_reference")
            self.degenerate = degenerate_reason(lambda inputs, m=ref_model: m(*inputs),
                                                [lambda i=i: self.source.inputs(i) for i in (-1, -2, -3)])
            mark("setup_lint")
        except Verdicted:
            raise
        except TaskTooLarge as err:
            self.evidence.memory = self.memory.evidence()
            raise Verdicted(Verdict.INFRA_ERROR, str(err), InfraCause.TASK_TOO_LARGE) from None
        except torch.cuda.OutOfMemoryError as err:
            raise Verdicted(Verdict.INFRA_ERROR, out_of_memory_reason(
                err, self.device, self.memory.footprint, "while the judge ran the reference"),
                InfraCause.TASK_TOO_LARGE) from None
        except Exception:  # noqa: BLE001 - the task itself is broken: not the candidate's fault
            raise Verdicted(Verdict.INFRA_ERROR, "the task failed to run:\n" + traceback.format_exc()[-4000:]) from None
        if self.degenerate:
            self.evidence.task_flags["degenerate"] = self.degenerate
        self.t_ref_est = t_ref
        self.ref_recent: collections.deque[int] = collections.deque(maxlen=64)  # the last calls' ns
        self._setup_precision(ref_model, mark)  # converts ref_model to float64
        del ref_model
        sample = self.source.inputs(-1)
        in_bytes = _tensors_bytes(sample)
        # Timed blocks where a round's inputs fit the staging area; decided before the arenas, which
        # they share with the correctness rounds, and confirmed once both workers have their gates.
        self.timed = (cfg.timing_protocol == "blocks" and not self.correctness_only
                      and in_bytes <= STAGING_MAX_BYTES)
        if self.timed:
            self.staging_layout = StagingLayout.for_inputs(
                [v.contiguous() if isinstance(v, torch.Tensor) else v for v in sample])
        del sample
        self.memory.release()  # after that draw too: the rounds are checked against what is free then
        out_bytes = sum(aligned(math.prod(s) * d.itemsize) for s, d in self.out_struct)
        budget = ARENA_BUDGET_BYTES["cuda" if self.device.type == "cuda" else "cpu"]
        per_round = 2 * (in_bytes + out_bytes)
        self.rounds_per_batch = max(1, min(MAX_ROUNDS_PER_BATCH, budget // max(per_round, 1)))
        if self.correctness_only:
            self.rounds_per_batch = min(self.rounds_per_batch, cfg.num_correctness_inputs)
        elif self.timed:  # a timed block needs a few calls beside its warm-up: arenas that large, where memory allows
            self.rounds_per_batch = max(self.rounds_per_batch, MIN_BLOCK_CALLS)
        try:
            self.rounds_per_batch = self.memory.before_rounds(in_bytes, out_bytes, self.rounds_per_batch)
            if self.rounds_per_batch < MIN_BLOCK_ROUNDS:
                self.block_rounds = range(0)  # one call per exchange, as without blocks
            if self.rounds_per_batch < MIN_BLOCK_CALLS:
                self.timed = False  # timed rounds one call per exchange too
            self.arenas = {
                (role, kind): Arena.allocate(n * self.rounds_per_batch, str(self.device),
                                             (self.ref if role == REFERENCE else self.cand).arena_fds.pop(kind, None))
                for role in (REFERENCE, CANDIDATE) for kind, n in (("in", in_bytes), ("out", out_bytes))
            }
        except TaskTooLarge as err:
            raise Verdicted(Verdict.INFRA_ERROR, str(err), InfraCause.TASK_TOO_LARGE) from None
        except torch.cuda.OutOfMemoryError as err:
            raise Verdicted(Verdict.INFRA_ERROR, out_of_memory_reason(
                err, self.device, self.memory.footprint, "while the judge allocated the input/output arenas"),
                InfraCause.TASK_TOO_LARGE) from None
        finally:
            self.evidence.memory = self.memory.evidence()
        arenas.extend(self.arenas.values())
        if self.timed:
            assert self.staging_layout is not None
            for role, worker in ((REFERENCE, self.ref), (CANDIDATE, self.cand)):
                area = Arena.allocate(self.staging_layout.nbytes, "cpu", worker.arena_fds.pop("staging", None))
                arenas.append(area)
                self._staging_areas[role] = area
                self.staging[role] = JudgeStaging(area.buffer)
        mark("setup_arenas")
        flush_bytes = 0
        self.floor_output_bytes = sum(math.prod(s) * d.itemsize for s, d in self.out_struct)
        self.l2_bytes: int | None = None
        self.dram: DramPeak | None = None
        if self.device.type == "cuda":
            props = torch.cuda.get_device_properties(self.device)
            self.l2_bytes = int(getattr(props, "L2_cache_size", 0) or 0) or None
            flush_bytes = 2 * (self.l2_bytes or 50 << 20)
            if self.l2_bytes is not None and self.floor_output_bytes > 2 * self.l2_bytes:
                self.dram = dram_peak(*_cuda_identity(props))  # NVML; overlaps the workers' start-up
        self.evidence.inputs_on_device = self.source.on_device
        if (self.prepare_ahead or self.timed) and self.device.type == "cuda":
            # The judge's quiet-GPU probe (_judge_waits_quiet), its idle latency measured now, before
            # any candidate code has run (nothing of the candidate's can be on the device yet).
            self._quiet_probe = QuietProbe(torch, self.device, lambda: torch.cuda.synchronize(self.device))
        if self.trace is not None and self.device.type == "cuda":
            self.trace.clock_reader = nvml_clock_reader(*_cuda_identity(torch.cuda.get_device_properties(self.device)))
        mark("setup_device_facts")
        self.phases["judge_setup"] = time.monotonic() - t0

        t_load = time.monotonic()
        self._phase("load")
        common = {
            "device": "cuda:0" if self.device.type == "cuda" else "cpu",
            "limits": dataclasses.asdict(sandbox.Limits(
                memory_bytes=None if self.device.type == "cuda" else cfg.memory_limit_bytes,
                file_size_bytes=cfg.file_size_limit_bytes)),
            "num_threads": num_threads, "init_inputs": init_inputs, "weight_seed": weight_seed,
            "flush_bytes": flush_bytes, "tuple_out": self.tuple_out,
            "warm_calls": self.config.warm_calls,  # whether a worker keeps its first inputs for them
            "prepare_ahead": self.prepare_ahead,  # whether it prepares its next call after each reply
        }
        for worker in (self.ref, self.cand):  # no candidate code has run: a failure here is the farm's
            self._await_started(worker)
        # CPU: the evaluation's threads and one more (its protocol and the runtime's own threads),
        # the same for both workers; a tree that wants more is held back, not the neighbours.
        cores = worker_cpu_cores(num_threads)
        self._cgroup_notes = sorted({w.limit_cgroup(cfg.memory_limit_bytes, cores) for w in (self.ref, self.cand)})
        # Both load at once; the reference worker takes its quiet-GPU baseline before building the task.
        wire.send_pickle(self.ref.conn, {
            **common, "role": REFERENCE, "task_name": self.task.name, "task_source": self.task.source,
            "size_profiles": self.task.size_profiles, "profile": profile, "poison": self.reference_poison,
            "in_arena": self.arenas[REFERENCE, "in"].handle(), "out_arena": self.arenas[REFERENCE, "out"].handle(),
            "staging": self._staging_handle(REFERENCE),
        })
        wire.send_pickle(self.cand.conn, {
            **common, "role": CANDIDATE, "candidate_source": self.candidate_source,
            "cache_dir": self._staged_cache(), "arch": self.arch, **facts,
            "expected_extensions": self.expected_extensions, "failed_extensions": self.failed_extensions,
            "in_arena": self.arenas[CANDIDATE, "in"].handle(), "out_arena": self.arenas[CANDIDATE, "out"].handle(),
            "staging": self._staging_handle(CANDIDATE),
        })
        ready = self._recv(self.ref, cfg.load_timeout_s, "loading the reference")
        if ready.get("op") != "ready":
            self._raise_worker_error(ready, self.ref)
        ref_gate = ready.get("gate") is True
        ready = self._recv(self.cand, cfg.load_timeout_s, "loading the candidate")
        # Timed blocks need both gates (the worker's isolation notes say why one is missing); the
        # candidate's report only ever turns them off, to the lone calls every worker runs.
        self.timed = self.timed and ref_gate and ready.get("gate") is True
        self._note_isolation(ready)  # also when the load failed: the evidence names what was in force
        if ready.get("op") != "ready":
            self._raise_worker_error(ready, self.cand)
        self._stop(REFERENCE)
        self._stop(CANDIDATE)
        self.evidence.build["worker_extensions"] = ready.get("extensions", [])
        raised = extension_facts.worker_build_failures(ready.get("build_failures"))
        if raised:  # build failures the candidate caught and went on past
            self.evidence.build["worker_build_failures"] = raised
        self._check_symbols(ready.get("extensions", []))
        self.phases["load"] = time.monotonic() - t_load
        if self._hold is not None:
            self._hold.ask()
            self.phases["held_for_standby"] = 0.0  # the wait left once correctness is done
        result = self._measure()
        if result.ok and not self.correctness_only and self.evidence.timing is not None:
            self.evidence.roofline = self._roofline(self.evidence.timing)
        if self.diagnostics.profile_dir and not self.correctness_only:
            self.evidence.diagnostics["profile"] = self._profile(profile)
        if result.ok and not self.correctness_only and (ready.get("extensions") or self.failed_extensions or raised):
            self.evidence.build["own_kernels"] = self._own_kernels(bool(ready.get("extensions")))
        return result

    def _setup_precision(self, model: Any, mark: Any) -> None:
        """One reference call's FLOPs and bytes (evalfarm.judge.roofline), then the precision gate's
        float64 ground truths of its rounds (evalfarm.judge.precision), which converts ``model``
        to float64. Neither is ever a verdict: a failure is a note in the evidence."""
        self.roofline_counts = roofline.count(model, self.source.inputs(-1), self.out_struct)
        mark("setup_roofline")
        cfg = self.config
        reason = precision.not_applied_reason(cfg.precision, cfg.guard_policy, [d for _s, d in self.out_struct])
        if reason:
            self.evidence.precision = precision.not_applied(reason)
        else:
            try:
                self.precision_gate, ev = precision.prepare(model, self.source, self.out_struct, self.device,
                                                            cfg.num_correctness_inputs, self.rng,
                                                            self.roofline_counts.flops)
            except Exception as err:  # noqa: BLE001 - the farm's problem, never the candidate's
                self.source.widen(precision.WidenSpec(), ())
                ev = precision.not_applied(f"no float64 ground truth: {type(err).__name__}: {str(err)[:300]}")
            self.evidence.precision = self.precision_gate.evidence() if self.precision_gate is not None else ev
        mark("setup_precision")

    def _precision_round(self, plan: RoundPlan, ref_out: Any, cand_out: Any) -> None:
        """A gated round's outputs into the precision gate; INCORRECT after the last one when the
        candidate is less precise than the reference."""
        gate = self.precision_gate
        assert gate is not None
        try:
            problem = gate.add(plan.r, plan.inputs, flatten_output(ref_out), flatten_output(cand_out))
        except Exception as err:  # noqa: BLE001 - the farm's problem: the gate is dropped, with a note
            self.precision_gate = None
            self.evidence.precision = precision.not_applied(
                f"dropped at round {plan.r}: {type(err).__name__}: {str(err)[:300]}", gate.notes)
            return
        self.evidence.precision = gate.evidence()
        if problem:
            raise Verdicted(Verdict.INCORRECT, f"precision gate ({self.evidence.precision['rounds']} of the "
                            f"{self.config.num_correctness_inputs} correctness inputs): {problem}")

    def _roofline(self, timing: TimingEvidence) -> dict[str, Any]:
        """``evidence.roofline`` of an OK result (evalfarm.judge.roofline)."""
        counts = self.roofline_counts
        assert counts is not None
        if self.device.type == "cuda":
            props = torch.cuda.get_device_properties(self.device)
            dram = self.dram or dram_peak(*_cuda_identity(props))
            peaks = roofline.peaks("cuda", props.name, (props.major, props.minor), counts.dtype,
                                   dram.bytes_per_s, dram.note)
        else:
            peaks = roofline.peaks("cpu", self.evidence.device_name, None, counts.dtype)
        return roofline.evidence(counts, timing.ref_time_us_median, timing.cand_time_us_median, peaks)

    def _staging_handle(self, role: str) -> dict[str, Any] | None:
        """What a worker needs to map its staging area; None without timed blocks."""
        area = self._staging_areas.get(role)
        return area.handle() if area is not None else None

    def _setup_clock(self, t0: float) -> Any:
        """``mark(name)``: the time since the previous mark (``t0`` at first) into setup_phases."""
        last = [t0]

        def mark(name: str) -> None:
            now = time.monotonic()
            self.setup_phases[name] = self.setup_phases.get(name, 0.0) + now - last[0]
            last[0] = now

        return mark

    def _profile(self, size_profile: str) -> dict[str, Any]:
        """--profile: one extra, untimed candidate call under the torch profiler, with fresh inputs,
        after every timed round; the trace is copied out of the worker's directory. Then an Nsight
        Compute report of one call where ncu exists (evalfarm.judge.diagnose). Never a verdict."""
        inputs = [v.contiguous() if isinstance(v, torch.Tensor) else v for v in self.source.inputs(PROFILE_INPUT_INDEX)]
        spec = diagnose.write_inputs(self.arenas[CANDIDATE, "in"], inputs)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        # A subdirectory of the worker's own directory that stays the host's (the rest of that
        # directory is a tmpfs of the worker's mount namespace, which the judge cannot see).
        worker_dir = os.path.join(self._tmp, CANDIDATE, PROFILE_DIR)
        os.makedirs(worker_dir, exist_ok=True)
        os.chmod(worker_dir, 0o777)  # the worker may run as an unprivileged uid
        self._resume(CANDIDATE)
        try:
            wire.send_json(self.cand.conn, {"op": "profile", "in": spec, "dir": worker_dir})
            msg = wire.recv_json(self.cand.conn, PROFILE_TIMEOUT_S + self._call_limit_s())
        except (TimeoutError, OSError, wire.PeerClosed, wire.ProtocolError) as err:
            msg = {"op": "profile_failed", "detail": f"the candidate worker did not answer: {type(err).__name__}"}
        finally:
            self._stop(CANDIDATE)
        visible = os.environ.get("CUDA_VISIBLE_DEVICES_FOR_WORKER", "") or _visible(str(self.device.index or 0))
        return diagnose.finish_profile(
            str(self.diagnostics.profile_dir), worker_dir, msg, device=str(self.device), tmp=self._tmp,
            visible=visible, size_profile=size_profile, spec={
                "task_name": self.task.name, "task_source": self.task.source, "size_profiles": self.task.size_profiles,
                "profile": size_profile, "candidate_source": self.candidate_source, "cache_dir": self._staged_cache(),
                "arch": self.arch})

    def _own_kernels(self, loaded: bool) -> dict[str, Any]:
        """How much of the candidate's GPU time runs in its own extensions' kernels: one extra,
        untimed call under the CUDA profiler with fresh inputs (evalfarm.judge.extension_facts).
        Evidence for a learner, never a verdict."""
        if not loaded:
            return extension_facts.no_own_extension()
        if self.device.type != "cuda":
            return extension_facts.not_measured(extension_facts.CPU_NOTE)
        if not self._extension_files:
            return extension_facts.not_measured("the built extensions were not found to read their names")
        own, note = extension_facts.own_kernel_names(self._extension_files)
        inputs = [v.contiguous() if isinstance(v, torch.Tensor) else v for v in self.source.inputs(KERNELS_INPUT_INDEX)]
        spec = diagnose.write_inputs(self.arenas[CANDIDATE, "in"], inputs)
        torch.cuda.synchronize(self.device)
        self._resume(CANDIDATE)
        try:
            wire.send_json(self.cand.conn, {"op": "kernels", "in": spec})
            reply = wire.recv_json(self.cand.conn, PROFILE_TIMEOUT_S + self._call_limit_s())
        except (TimeoutError, OSError, wire.PeerClosed, wire.ProtocolError) as err:
            reply = {"op": "kernels_failed", "detail": f"the candidate worker did not answer: {type(err).__name__}"}
        finally:
            self._stop(CANDIDATE)
        return extension_facts.kernel_share(reply, own, note)

    def _save_failing(self, plan: RoundPlan, reason: str, ref_out: list[Any], cand_out: list[Any]) -> None:
        """--save-failing-input: the judge writes the failing round's tensors (never the worker)."""
        if not self.diagnostics.failing_input_dir or "failing_input" in self.evidence.diagnostics:
            return
        try:
            self.evidence.diagnostics["failing_input"] = diagnose.save_failing_round(
                self.diagnostics.failing_input_dir, task=self.task.name, round_index=plan.r, reason=reason,
                inputs=plan.inputs, reference=ref_out, candidate=cand_out, size_profile=self.evidence.size_profile)
        except (OSError, RuntimeError) as err:
            self.evidence.diagnostics["failing_input"] = {"note": f"could not write the failing input: {err}"}

    def _save_structure_failure(self, plan: RoundPlan, detail: str) -> None:
        """--save-failing-input for an output of the wrong type, shape, dtype or device: the round's
        inputs and, when the reference already ran in this round, its output; the candidate's output
        never reached the judge (the worker refused it), so that file holds an empty list."""
        ref_out: list[Any] = []
        if plan.first == REFERENCE and plan.calls[REFERENCE].out_slots:
            arena = self.arenas[REFERENCE, "out"]
            ref_out = [arena.view(s) for s in plan.calls[REFERENCE].out_slots]
        self._save_failing(plan, f"structure: {detail}" + ("" if ref_out else " (the reference had not run yet in "
                           "this round: its output is not saved)"), ref_out, [])

    def _staged_cache(self) -> str:
        """The extensions the build pool installed for this candidate, copied out of the cache into
        the directory its worker sees read-only (evalfarm.judge.workers): the worker's sandbox never
        shows the cache itself, where every other candidate's builds are."""
        from evalfarm.build.cache import ExtensionCache

        dest = self._staged
        if not os.path.isdir(os.path.join(dest, "ext")):
            ExtensionCache(self.cache_dir).stage(self.expected_extensions, dest)
        return dest

    def _check_symbols(self, extensions: Any) -> None:
        """Static check of every extension the worker loaded, read from the cache (not the worker).

        Every finding goes into the evidence; only a blocking one (symbol interposition, which the
        worker's own clock cannot see) decides the verdict."""
        from evalfarm.build.cache import ExtensionCache
        from evalfarm.guards import ElfError, GuardPolicy, blocking, check_extension_symbols

        if not isinstance(extensions, list):
            return
        cache = ExtensionCache(self.cache_dir)
        policy = GuardPolicy.from_name(self.config.guard_policy)
        for ext in extensions:
            if not isinstance(ext, dict):
                continue
            key, name = str(ext.get("key", "")), str(ext.get("name", ""))
            if len(key) != 64 or not key.isalnum() or not name.isidentifier():
                raise Verdicted(Verdict.HACK_DETECTED, "guard worker_protocol: malformed extension report")
            so = cache.lookup(key, name)  # verified against its recorded hashes
            private = os.path.join(self._tmp, CANDIDATE, EXT_DIR, key, f"{name}.so")
            if so is None and os.path.isfile(private):
                so = private  # built by the worker for itself (no verified cache entry)
            if so is None:
                continue
            self._extension_files.append(str(so))
            try:
                findings = check_extension_symbols(so, policy)
            except ElfError as err:
                raise Verdicted(Verdict.INFRA_ERROR, f"cannot read built extension {name}: {err}") from None
            self.evidence.static_findings.extend(f.to_dict() for f in findings)
            blocks = blocking(findings)
            if blocks:
                self.evidence.guards.extend(f"{f.guard}: {f.reason}" for f in blocks)
                raise Verdicted(Verdict.HACK_DETECTED, f"guard {blocks[0].guard}: {blocks[0].reason}")

    def _ref_call(self, model: Any, inputs: list[Any]) -> tuple[Any, float]:
        sync = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)
        sync()
        t0 = time.perf_counter()
        out = model(*inputs)
        sync()
        return out, time.perf_counter() - t0

    def _note_reference_call(self, t_ns: int) -> None:
        """A reference call's time, into the running estimate (call bounds) and the recent median
        (warm calls)."""
        self.t_ref_est = 0.9 * self.t_ref_est + 0.1 * t_ns / 1e9
        self.ref_recent.append(t_ns)

    def _reference_call_s(self) -> float:
        """The reference's usual call: the median of its last calls (a few slow ones on a loaded host
        do not move it), or the set-up estimate before any."""
        return statistics.median(self.ref_recent) / 1e9 if self.ref_recent else self.t_ref_est

    def _call_limit_s(self) -> float:
        return max(self.config.min_call_timeout_s, self.config.timeout_factor * self.t_ref_est)

    # --- a worker's process runs only while its own call is under way ------------------
    # Stopping the candidate keeps it from computing ahead, or competing with the reference, while
    # it is not being timed; stopping the reference too keeps the protocol the same for both (an
    # idle worker's spinning thread pool would otherwise take cores from the other's call on CPU).
    def _wait_bound(self, role: str) -> float:
        """How long the judge waits for one call of ``role`` on its own clock: the per-call bound
        plus slack, and for the reference at least twice its estimated time plus the smallest
        bound (a slow reference call is the farm's problem, never the candidate's)."""
        limit = self._call_limit_s() + ROUND_SLACK_S
        if role == REFERENCE:
            limit = max(limit, 2 * self.t_ref_est + ROUND_SLACK_S + self.config.min_call_timeout_s)
        return limit

    def _stop(self, role: str) -> None:
        worker = self.ref if role == REFERENCE else self.cand
        if role not in self._stopped and worker.signal_group(signal.SIGSTOP):
            self._stopped.add(role)

    def _resume(self, role: str) -> None:
        if role in self._stopped:
            worker = self.ref if role == REFERENCE else self.cand
            worker.signal_group(signal.SIGCONT)
            self._stopped.discard(role)

    def _resume_all(self) -> None:
        for role in list(self._stopped):
            self._resume(role)

    # --- rounds ----------------------------------------------------------------------
    def _plan_batch(self, first_round: int, audits: AuditSchedule) -> list[RoundPlan]:
        for a in self.arenas.values():
            a.reset()
        if self.trace is not None:
            self.trace.sample_clock()
        count = self.rounds_per_batch
        # A batch never straddles an edge of the block rounds: it runs either as one correctness
        # block or call by call (the warm-up before it, the timed rounds after it); nor, with timed
        # blocks, the end of correctness (the timed rounds after it run as timed blocks).
        n_correct = self.config.num_correctness_inputs
        edges = sorted({*((self.block_rounds.start, self.block_rounds.stop) if self.block_rounds else ()),
                        *((n_correct,) if self.timed else ())})
        for edge in edges:
            if first_round < edge:
                count = min(count, edge - first_round)
                break
        plans = []
        # The same for both workers and decided here, by the judge (ScoreConfig.warm_call); only for
        # rounds run one call per exchange (a block's calls follow one another anyway).
        timed_block = self.timed and first_round >= n_correct
        warm_call = (self.config.warm_calls and not timed_block
                     and self._reference_call_s() < WARM_CALL_MAX_S)
        for k in range(count):
            r = first_round + k
            inputs = [v.contiguous() if isinstance(v, torch.Tensor) else v for v in self.source.inputs(r)]
            audited = audits.audited(r)
            calls = {}
            for role in (REFERENCE, CANDIDATE):
                in_arena, out_arena = self.arenas[role, "in"], self.arenas[role, "out"]
                slots = [in_arena.alloc(tuple(v.shape), v.dtype) if isinstance(v, torch.Tensor) else None
                         for v in inputs]
                spec = [["T", s.to_wire()] if s is not None else ["S", v] for s, v in zip(slots, inputs, strict=True)]
                # Both workers' outputs come back every round: the candidate's so every round looks
                # the same from inside its process, the reference's so both do the same work
                # outside their timed calls (what the judge's clock sees beyond them is compared).
                outs = [out_arena.alloc(s, d) for s, d in self.out_struct]
                for s in outs:  # poisoned, so a slot never written cannot pass
                    view = out_arena.view(s)
                    view.fill_(float("nan") if view.is_floating_point() else 0x5A)
                calls[role] = Call(slots, outs, {"op": "prepare", "r": r, "in": spec,
                                                 "out": [s.to_wire() for s in outs], "warm": warm_call})
            first = REFERENCE if self.rng.random() < 0.5 else CANDIDATE
            plans.append(RoundPlan(r, first, audited, inputs, calls, warm_call=warm_call,
                                   block_call=k if timed_block else None))
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return plans

    def _exchange(self, role: str, prepare: dict[str, Any], plans: list[RoundPlan], what: str,
                  limit: float, progress: list[tuple[int, str]] | None = None,
                  preparing: str = "", write_roles: tuple[str, ...] | None = None) -> tuple[dict[str, Any], int, int]:
        """One exchange with a worker: ``prepare`` (where it asks for one, a warm call first,
        answered "warmed" within ``limit`` s; then its own preparation, answered "prepared"), the
        worker stopped while the inputs of ``plans`` are written, then "go" and its reply within
        ``limit`` s. ``progress`` (a block's rounds but its last, each with what to call it): a
        "called" message is expected for each, in order, each within ``limit`` s of the one
        before, so a call that hangs is ended at the per-call bound; anything else there is
        taken as the reply. ``write_roles``: whose inputs of ``plans`` to write while it is stopped
        (default: this worker's; ROUND_WRITE_ENV: the other's too, which must have prepared ahead,
        or none, written in the exchange before, which needs this one prepared ahead). Returns the
        reply, the judge's nanoseconds from go to reply and from prepare to "warmed" (0 without a
        warm call); the worker is stopped again however the exchange ends."""
        worker = self.ref if role == REFERENCE else self.cand
        phases = self.round_phases
        stamps: dict[str, float] = {}  # the judge's clock at each step, for the round trace
        prepared: dict[str, Any] = {}
        ahead_msg: dict[str, Any] = {}
        # Prepared after its last reply (and stopped since): a lone call's round goes with "go".
        ahead = role in self._ready and prepare["op"] == "prepare" and not prepare.get("warm")
        write_roles = (role,) if write_roles is None else write_roles
        # Inputs are only ever written into a worker that has finished its preparation (and is stopped).
        if not ahead and write_roles != (role,):
            raise RuntimeError(f"inputs written before {role}'s own preparation")
        if any(other != role and other not in self._ready for other in write_roles):
            raise RuntimeError(f"inputs written into a worker not prepared ahead: {write_roles}")
        self._ready.discard(role)
        warm_ns = 0
        try:
            t0 = stamps["start"] = time.perf_counter()
            if not ahead:
                self._resume(role)
                wire.send_json(worker.conn, prepare)
                if prepare.get("warm"):
                    msg = self._recv(worker, limit, f"the untimed warm call before {preparing or what}")
                    stamps["warmed"] = time.perf_counter()
                    warm_ns = int((stamps["warmed"] - t0) * 1e9)
                    if msg.get("op") != "warmed":
                        self._raise_worker_error(msg, worker)
                prepared = self._recv(worker, PREPARE_TIMEOUT_S, f"preparing {preparing or what}")
                stamps["prepared"] = time.perf_counter()
                self._stop(role)  # stopped while its inputs are written
                self._note_prepared(prepared, worker)
            t1 = stamps["stopped"] = time.perf_counter()
            phases["rounds_prepare"] += t1 - t0
            if ahead and role == REFERENCE and self.device.type == "cuda":
                self._judge_waits_quiet()
                stamps["quiet"] = t1 = time.perf_counter()
            for writing in write_roles:
                for plan in plans:
                    self._write_inputs(writing, plan)
            if self.device.type == "cuda" and write_roles:
                torch.cuda.synchronize(self.device)
            stamps["written"] = time.perf_counter()
            go = {**prepare, "op": "go"} if ahead else {"op": "go"}
            if self.go_first:  # queued while it is stopped: its restarted read finds it (GO_FIRST_ENV)
                # The go step starts here, so its SIGCONT is inside it (the call may start before
                # the signal's system call returns): "resumed" marks where the write step ends.
                stamps["resumed"] = time.perf_counter()
                sent = time.perf_counter_ns()
                wire.send_json(worker.conn, go)
                self._resume(role)
            else:
                self._resume(role)
                stamps["resumed"] = time.perf_counter()
                sent = time.perf_counter_ns()
                wire.send_json(worker.conn, go)
            phases["rounds_write"] += stamps["resumed"] - t1
            res: dict[str, Any] | None = None
            for r, call_what in progress or ():
                msg = self._recv(worker, limit, call_what, spin=True)
                if msg.get("op") != "called" or _int(msg, "r") != r:
                    res = msg  # an error report ends the block; any other message is a bad reply
                    break
            if res is None:
                res = self._recv(worker, limit, what, spin=True)
            go_ns = time.perf_counter_ns() - sent
            stamps["replied"] = time.perf_counter()
            phases["rounds_go"] += go_ns / 1e9  # a block's later calls' preparations are in here
            if self.prepare_ahead and res.get("op") in ("round", "block"):
                t2 = time.perf_counter()
                ahead_msg = self._recv(worker, PREPARE_TIMEOUT_S, f"preparing the call after {what}", spin=True)
                stamps["ahead"] = time.perf_counter()
                phases["rounds_prepare"] += stamps["ahead"] - t2
                self._note_prepared(ahead_msg, worker)
                self._ready.add(role)
        finally:
            self._stop(role)
        if self.trace is not None:
            stamps["final_stop"] = time.perf_counter()
            self.trace.exchange(role, [plan.r for plan in plans], stamps, prepared, res, ahead_msg, write_roles)
        return res, go_ns, warm_ns

    def _run_call(self, role: str, plan: RoundPlan, limit: float,
                  write_roles: tuple[str, ...] | None = None) -> dict[str, Any]:
        """One timed call in one worker: prepare, then the inputs written, then go.

        The inputs of a round reach the worker's memory only after it has finished its own
        preparation (poisoning, L2 flush, synchronisation), right before the call starts, so no
        code in the candidate's process sees them outside the timed call. ``write_roles``: as
        ``_exchange`` takes it (ROUND_WRITE_ENV)."""
        worker = self.ref if role == REFERENCE else self.cand
        res, go_ns, warm_ns = self._exchange(role, plan.calls[role].prepare, [plan], f"round {plan.r}", limit,
                                             write_roles=write_roles)
        res["j"] = go_ns  # the judge's own clock, never the worker's
        res["w"] = warm_ns  # the warm call before it, on the judge's clock (0: none)
        if res.get("op") != "round":
            self._raise_call_error(role, res, plan)
        check_round_result(res, plan.r)
        if role == CANDIDATE:
            self._check_contained(worker)
        return res

    def _raise_call_error(self, role: str, res: dict[str, Any], plan: RoundPlan | None) -> None:
        """A worker's failed call as its verdict; a candidate's wrong output structure in a
        correctness round (``plan``, the round the report names) is saved as a failing input first."""
        if (role == CANDIDATE and res.get("kind") == "structure" and plan is not None
                and plan.r < self.config.num_correctness_inputs):
            self._save_structure_failure(plan, str(res.get("detail", ""))[:2000])
        self._raise_worker_error(res, self.ref if role == REFERENCE else self.cand)

    def _judge_waits_quiet(self) -> None:
        """Before a reference call prepared ahead: the quiet-GPU wait the reference worker makes in its
        own preparation, made by the judge instead (evalfarm.judge.quiet), with the candidate's process
        stopped, from the judge's context, which writes the reference's inputs next anyway."""
        assert self._quiet_probe is not None  # made in the set-up, before any candidate code ran
        quiet, waited = self._quiet_probe.wait()
        if not quiet:
            raise self._blame_busy_gpu(waited)
        self._note_quiet_wait(waited)

    def _note_prepared(self, msg: dict[str, Any], worker: WorkerHandle) -> None:
        """A worker's answer to prepare (or prepare_block): go on only when it is ready."""
        if msg.get("op") == "busy":
            raise self._blame_busy_gpu(float(msg.get("waited_s", 0)))
        if msg.get("op") != "prepared":
            self._raise_worker_error(msg, worker)
        # The worker's own report: a diagnostic, never a score.
        if isinstance(msg.get("poison_s"), float) and 0.0 <= msg["poison_s"] < PREPARE_TIMEOUT_S:
            self.round_phases["rounds_poison"] += msg["poison_s"]
        if isinstance(msg.get("quiet_wait_s"), float):
            self._note_quiet_wait(msg["quiet_wait_s"])

    def _note_quiet_wait(self, waited: float) -> None:
        """A quiet-GPU wait before a reference call (the reference worker's or the judge's): its time
        into the round phases, and a wait over QUIET_NOTE_S kept for the evidence's note."""
        if 0.0 <= waited < PREPARE_TIMEOUT_S:
            self.round_phases["rounds_quiet"] += waited
        if waited > QUIET_NOTE_S:
            self.quiet_waits.append(waited)

    def _write_inputs(self, role: str, plan: RoundPlan) -> None:
        """A round's inputs into the worker's input slots (the caller synchronises)."""
        arena = self.arenas[role, "in"]
        for v, slot in zip(plan.inputs, plan.calls[role].in_slots, strict=True):
            if slot is not None:
                arena.view(slot).copy_(v)

    def _run_block(self, plans: list[RoundPlan]) -> None:
        """A batch of correctness rounds as one block per worker (``ScoreConfig.correctness_block``).

        Each worker runs all of the batch's calls in one exchange (``_run_block_calls``), the two
        workers in an order drawn per block, instead of one exchange per call: the exchange (two
        round trips, four stop/continue signals, synchronisations across three CUDA contexts)
        costs more than a small kernel's call. Why the guarantees hold:

        * a block's inputs are all in the candidate's memory from before its first call to after
          its last, so it could read ahead and start on later rounds early; that can only speed
          up calls whose times are never used for the score (block rounds are checked, never timed);
          writing into them is caught as writing into its own input is (the input check after
          the batch, and outputs compared with the reference's for the judge's pristine copy);
        * every output is still compared against the reference worker's output for the same input
          (block rounds are correctness rounds: all audited, after the batch as before);
        * the reference and the candidate still run in separate processes, the candidate's
          stopped while the reference's block runs;
        * output slots are still poisoned (NaN) before their round, and every call is preceded by
          the same preparation (free memory poisoned, L2 reset, synchronisation) and followed by the
          same structure, aliasing and persistence checks as a lone call;
        * a candidate that counts its calls could always tell correctness rounds from timed ones;
          behaving differently in the timed rounds is what their audits catch, blocks or not.

        Bounded twice: each call by the per-call bound, from the worker's reported times, and on
        the judge's clock, from the "called" message the worker sends after each call but the last
        (a hung call ends the block at its own bound)."""
        cfg = self.config
        first = plans[0].first
        for plan in plans:
            plan.first = first  # whose block ran first (what a saved structure failure looks at)
        results: dict[str, list[dict[str, Any]]] = {}
        call_ns: dict[str, int] = {}
        leftover_ns: dict[str, int] = {}
        for role in ((REFERENCE, CANDIDATE) if first == REFERENCE else (CANDIDATE, REFERENCE)):
            t_step = time.monotonic()
            results[role], go_ns = self._run_block_calls(role, plans, self._wait_bound(role))
            self.round_phases["rounds_exchange"] += time.monotonic() - t_step
            call_ns[role] = sum(res["t"] for res in results[role])
            leftover_ns[role] = go_ns - call_ns[role]
            self.round_phases["rounds_calls"] += call_ns[role] / 1e9
        self.block_log.add(first, len(plans), call_ns, leftover_ns)
        for k, plan in enumerate(plans):  # in round order, as lone calls are checked
            plan.times = {role: results[role][k] for role in (REFERENCE, CANDIDATE)}
            t_cand = plan.times[CANDIDATE]["t"]
            if t_cand / 1e9 > self._call_limit_s():
                raise Verdicted(Verdict.TIMEOUT, (
                    f"correctness round {plan.r} (in a block): a call took {t_cand / 1e6:.1f} ms, more than the "
                    f"per-call bound of {self._call_limit_s():.3g} s ({cfg.timeout_factor:g}x the reference's "
                    f"{self.t_ref_est * 1e3:.3f} ms, at least {cfg.min_call_timeout_s:g} s)"))
            self._note_reference_call(plan.times[REFERENCE]["t"])

    def _run_block_calls(self, role: str, plans: list[RoundPlan], per_call: float) -> tuple[list[dict[str, Any]], int]:
        """One worker's part of a correctness block: prepare_block (the first call's preparation),
        then every round's inputs written, then go; the worker runs the rounds in order and replies
        once. Returns the per-round results, checked against the rounds sent, and the judge's
        nanoseconds from go to reply."""
        worker = self.ref if role == REFERENCE else self.cand
        rounds = [plan.r for plan in plans]
        span = f"correctness rounds {rounds[0]} to {rounds[-1]}" if len(rounds) > 1 else f"correctness round {rounds[0]}"
        message = {"op": "prepare_block", "rounds": [
            {"r": plan.r, "in": plan.calls[role].prepare["in"], "out": plan.calls[role].prepare["out"]}
            for plan in plans]}
        # On the judge's clock, call by call (the worker says "called" after each but the last): a
        # call that hangs is killed at the per-call bound, as TIMEOUT (the candidate) or
        # INFRA_ERROR (the reference).
        n = len(plans)
        whats = [f"correctness round {r} (call {k + 1} of a block of {n}, at most {per_call:.3g} s)"
                 for k, r in enumerate(rounds)]
        res, go_ns, _ = self._exchange(role, message, plans, whats[-1], per_call,
                                    list(zip(rounds[:-1], whats, strict=False)), preparing=span)
        if res.get("op") != "block":
            self._raise_call_error(role, res, next((plan for plan in plans if plan.r == res.get("round")), None))
        results = block_results(res, rounds)
        if role == CANDIDATE:
            self._check_contained(worker)
        return results, go_ns

    def _run_timed_pair(self, plans: list[RoundPlan]) -> None:
        """A batch of timed rounds as a pair of timed blocks (evalfarm.judge.timed_blocks): each
        worker's block runs the batch's rounds in order with the same inputs, the two blocks in the
        order drawn for the batch, the other worker stopped meanwhile; on a GPU the judge first waits
        for a quiet device before the reference's block (work left running is the candidate's)."""
        first = plans[0].first
        for plan in plans:
            plan.first = first
        # The judge's host copies of the rounds' inputs, which it writes into each staging area.
        staged = [[v.to("cpu") if isinstance(v, torch.Tensor) else v for v in plan.inputs] for plan in plans]
        results: dict[str, list[dict[str, Any]]] = {}
        for role in ((REFERENCE, CANDIDATE) if first == REFERENCE else (CANDIDATE, REFERENCE)):
            if role == REFERENCE and self.device.type == "cuda":
                self._judge_waits_quiet()
            t_step = time.monotonic()
            results[role] = self._run_timed_block(role, plans, staged)
            self.round_phases["rounds_exchange"] += time.monotonic() - t_step
            self.round_phases["rounds_calls"] += sum(res["t"] for res in results[role]) / 1e9
        for k, plan in enumerate(plans):
            plan.times = {role: results[role][k] for role in (REFERENCE, CANDIDATE)}
            t_cand = plan.times[CANDIDATE]["t"]
            if t_cand / 1e9 > self._call_limit_s():
                raise Verdicted(Verdict.TIMEOUT, f"a call took {t_cand / 1e6:.1f} ms, more than "
                                f"{self.config.timeout_factor:g}x the reference's {self.t_ref_est * 1e3:.3f} ms")
            self._note_reference_call(plan.times[REFERENCE]["t"])

    def _run_timed_block(self, role: str, plans: list[RoundPlan], staged: list[list[Any]]) -> list[dict[str, Any]]:
        """One worker's timed block: the calls sent, released one at a time through its staging area
        (``release_calls``), then its reply. Returns the per-call results, checked against the
        rounds sent, each with ``j``: its time on the judge's clock (``judge_windows_ns``)."""
        worker = self.ref if role == REFERENCE else self.cand
        assert self.staging_layout is not None
        seq0, self._seq = self._seq, self._seq + len(plans)
        rounds = [plan.r for plan in plans]
        message = {"op": "timed_block", "seq0": seq0, "layout": self.staging_layout.to_wire(), "rounds": [
            {"r": plan.r, "in": plan.calls[role].prepare["in"], "out": plan.calls[role].prepare["out"]}
            for plan in plans]}
        bound = self._wait_bound(role)
        self._ready.discard(role)  # its next lone call (if any) prepares again
        try:
            self._resume(role)
            sent = time.perf_counter()
            wire.send_json(worker.conn, message)
            signals: WordSignals | MessageSignals = (
                WordSignals(self.staging[role], lambda: worker.conn.poll(0), self.spin_s or 50e-6)
                if self.device.type == "cuda" else
                MessageSignals(lambda m: wire.send_json(worker.conn, m), lambda t: wire.recv_json(worker.conn, t)))
            released = release_calls(self.staging[role], self.staging_layout, staged, seq0, lambda k: bound, signals)
            if released.outcome == "timeout":
                r = rounds[released.stuck]
                sandbox.kill_group(worker.proc)
                if role == REFERENCE:
                    raise Verdicted(Verdict.INFRA_ERROR, f"the reference worker did not finish round {r} (a timed "
                                    f"block's call) within {bound:.3g} s")
                raise Verdicted(Verdict.TIMEOUT, f"the candidate did not finish round {r} (call "
                                f"{released.stuck + 1} of a timed block of {len(plans)}) within {bound:.3g} s")
            reply = (signals.message if isinstance(signals, MessageSignals) and signals.message is not None
                     else self._recv(worker, bound, f"round {rounds[-1]} (the end of a timed block)", spin=True))
            reply_ns = time.perf_counter_ns()
            self.round_phases["rounds_go"] += time.perf_counter() - sent  # its calls, the judge's writes between them
        finally:
            self._stop(role)
        if reply.get("op") != "block" or released.outcome != "ok":
            self._raise_call_error(role, reply, next((p for p in plans if p.r == reply.get("round")), None))
        results = block_results(reply, rounds)
        tail = tail_share_ns(released, reply_ns)
        for res, j in zip(results, judge_windows_ns(released), strict=True):
            res["j"], res["w"], res["tail"] = j, 0, tail
        if self.trace is not None:
            self.trace.timed_block(role, results)
        if role == CANDIDATE:
            self._check_contained(worker)
        return results

    def _blame_busy_gpu(self, waited_s: float) -> Verdicted:
        """The reference worker found the GPU busy before its call, with the candidate's process
        stopped. Whose work is it? Kill the candidate's processes (their GPU contexts, and all work
        they queued, go with them) and ask again: quiet now, it was the candidate's; still busy,
        something outside this evaluation shares the GPU, which is no verdict on the candidate."""
        sandbox.kill_group(self.cand.proc)
        if self.cand.cgroup is not None:
            self.cand.cgroup.kill()
        self._resume(REFERENCE)
        wire.send_json(self.ref.conn, {"op": "quiet"})
        reply = self._recv(self.ref, QUIET_WAIT_S + 30.0, "checking the GPU again after the candidate was killed")
        if reply.get("op") != "quiet":
            self._raise_worker_error(reply, self.ref)
        again = float(reply.get("waited_s", 0.0))
        if reply.get("quiet"):
            return Verdicted(Verdict.HACK_DETECTED, (
                f"guard lingering_gpu_work: the GPU stayed busy for {waited_s:.1f} s after the candidate's call "
                f"returned and its process was stopped, and went quiet {again:.2f} s after its process was "
                "killed: it left work running outside its timed call"))
        return Verdicted(Verdict.INFRA_ERROR, (
            f"the GPU stayed busy for {waited_s:.1f} s before the reference's call, and {again:.1f} s more "
            "after the candidate's process was killed: work from outside this evaluation shares the GPU "
            "(nvidia-smi lists the processes using it); give the farm its GPUs alone"))

    @staticmethod
    def _check_contained(worker: WorkerHandle) -> None:
        """HACK_DETECTED when a process of the candidate's cgroup left its process group.

        Stopping a worker stops its process group; a process that left it (setsid, setpgid) would
        run on while the candidate is stopped: during the reference's call, or while the next
        inputs are written, which it could read ahead. Checked after each of the candidate's calls,
        once its group was stopped. Where the worker has no cgroup nothing can be listed, and the
        static rule process_abuse is what refuses such code."""
        escaped = worker.escaped_processes()
        if escaped:
            raise Verdicted(Verdict.HACK_DETECTED, (
                f"guard escaped_process: {len(escaped)} process(es) of the candidate left its process group "
                f"(setsid or setpgid; pids {', '.join(map(str, escaped[:5]))}), so they would keep running while "
                "its process is stopped"))

    def _measure(self) -> ScoreResult:
        cfg = self.config
        n_correct = cfg.num_correctness_inputs
        audits = AuditSchedule(cfg.audit_fraction, n_correct, self.rng)
        speedups: list[float] = []
        t_ref_all: list[int] = []
        t_cand_all: list[int] = []
        pre_ref_all: list[int] = []
        pre_cand_all: list[int] = []
        untimed_ref_all: list[int] = []  # per round: the judge-timed exchange minus the reported call
        untimed_cand_all: list[int] = []
        tails_ref_all: list[int] = []  # timed blocks: each sample's share of its block's tail, per worker
        tails_cand_all: list[int] = []
        charge = pre_charge = exchange_charge = exchange_excess = 0
        e_ref_all: list[float] = []
        clock_pairs: list[tuple[int, float]] = []  # per timed round: the candidate's call ns and event us
        e_cand_all: list[float] = []
        self.quiet_waits: list[float] = []
        worst = Comparison(ok=True)
        audited = 0
        remeasured = 0
        r = 0
        # Calls before the first timed round may build, autotune or compile lazily: together they
        # get first_call_timeout_s on top of the per-call bound.
        allowance = cfg.first_call_timeout_s
        start = time.monotonic()
        self._phase("correctness")
        timing_start: float | None = None
        # Times count from the first batch planned after the owner's go (RoundsHold); before it a
        # standby judge of this device may still be starting up, so those rounds are only checked.
        counted_from: float | None = start if self._hold is None else None
        set_aside = 0
        # Correctness rounds run in blocks: checked, never timed. With any, the timed rounds all
        # come after correctness; the budget still counts from the first round, but the minimum
        # timed rounds are collected even when correctness used it up.
        in_blocks = 0
        timed_block_rounds = 0
        warm_call_rounds = 0
        blocks = self.block_rounds
        stable = True
        acc = self.round_phases
        while True:
            if counted_from is None and self._hold is not None and self._hold.released():
                counted_from = time.monotonic()
            counted = counted_from is not None
            if self.trace is not None:
                self.trace.counted = counted
            t_step = time.monotonic()
            plans = self._plan_batch(r, audits)
            acc["rounds_inputs"] += time.monotonic() - t_step
            if plans[0].r in blocks:  # _plan_batch keeps a batch on one side of the blocks' edges
                self._run_block(plans)
                in_blocks += len(plans)
            elif plans[0].block_call is not None:
                self._run_timed_pair(plans)
                timed_block_rounds += len(plans)
            else:
                for plan in plans:
                    warm = plan.r < max(cfg.warmup_rounds, 1)
                    times: dict[str, dict[str, Any]] = {}
                    order = (REFERENCE, CANDIDATE) if plan.first == REFERENCE else (CANDIDATE, REFERENCE)
                    # ROUND_WRITE_ENV: both prepared ahead, so both workers' inputs go in the first exchange.
                    one_write = self.round_write and not plan.warm_call and self._ready >= set(order)
                    for k, role in enumerate(order):
                        limit = self._wait_bound(role)
                        if role == CANDIDATE and warm:
                            limit += allowance
                        t_step = time.monotonic()
                        times[role] = self._run_call(role, plan, limit, (order if k == 0 else ()) if one_write else None)
                        acc["rounds_exchange"] += time.monotonic() - t_step
                        acc["rounds_calls"] += times[role]["t"] / 1e9
                    t_ref, t_cand = times[REFERENCE]["t"], times[CANDIDATE]["t"]
                    # A warm call (ScoreConfig.warm_call) is bounded as a call is, on the judge's clock.
                    t_warm = times[CANDIDATE].get("w", 0)
                    over_warm = t_warm / 1e9 - self._call_limit_s()
                    over = t_cand / 1e9 - self._call_limit_s()
                    if warm and max(0.0, over) + max(0.0, over_warm) > allowance:
                        raise Verdicted(Verdict.TIMEOUT, f"round {plan.r}: the calls before the first timed round "
                                        f"took more than the per-call bound ({self._call_limit_s():.3g} s) plus the "
                                        f"first-call allowance ({cfg.first_call_timeout_s:g} s in all)")
                    if warm:
                        allowance -= max(0.0, over) + max(0.0, over_warm)
                    elif over > 0:
                        raise Verdicted(Verdict.TIMEOUT, f"a call took {t_cand / 1e6:.1f} ms, more than "
                                        f"{cfg.timeout_factor:g}x the reference's {self.t_ref_est * 1e3:.3f} ms")
                    elif over_warm > 0:
                        raise Verdicted(Verdict.TIMEOUT, f"round {plan.r}: the untimed warm call before it took "
                                        f"{t_warm / 1e6:.1f} ms, more than {cfg.timeout_factor:g}x the reference's "
                                        f"{self.t_ref_est * 1e3:.3f} ms (warm calls are bounded as calls are)")
                    self._note_reference_call(t_ref)
                    plan.times = times
            # Audits run only now, with both workers idle: judge work on the device never
            # overlaps a timed call.
            for plan in plans:
                t_ref, t_cand = plan.times[REFERENCE]["t"], plan.times[CANDIDATE]["t"]
                if plan.audited:
                    audited += 1
                    t_step = time.monotonic()
                    c = self._audit(plan, in_correctness=plan.r < n_correct)
                    acc["rounds_audit"] += time.monotonic() - t_step
                    if c.rel_l2_error >= worst.rel_l2_error:
                        worst = c
                        self.evidence.worst_error = {**c.to_dict(), "round": plan.r}
                if plan.r in blocks:
                    continue  # checked above; its inputs were written before its block: never timed
                if self.timed and (plan.block_call is None or plan.block_call < WARMUP_CALLS):
                    continue  # with timed blocks only their calls are samples (a block's first: checked only)
                if plan.r >= cfg.warmup_rounds and not counted:
                    set_aside += 1  # checked above; its times are not used
                elif plan.r >= cfg.warmup_rounds:
                    warm_call_rounds += plan.warm_call  # reset with the samples on a re-measure
                    t_ref_all.append(t_ref)
                    t_cand_all.append(t_cand)
                    pre_ref_all.append(plan.times[REFERENCE]["pre"])
                    pre_cand_all.append(plan.times[CANDIDATE]["pre"])
                    untimed_ref_all.append(plan.times[REFERENCE]["j"] - t_ref)
                    untimed_cand_all.append(plan.times[CANDIDATE]["j"] - t_cand)
                    e_ref, e_cand = plan.times[REFERENCE].get("e"), plan.times[CANDIDATE].get("e")
                    if isinstance(e_ref, int | float) and isinstance(e_cand, int | float):
                        e_ref_all.append(float(e_ref))
                        e_cand_all.append(float(e_cand))
                        if not self.timed:  # the worker's clock around the call against its events
                            clock_pairs.append((t_cand, float(e_cand)))
                    if self.timed:  # the judge's window around the call against the time reported for it
                        clock_pairs.append((plan.times[CANDIDATE]["j"], t_cand / 1e3))
                        tails_ref_all.append(plan.times[REFERENCE]["tail"])
                        tails_cand_all.append(plan.times[CANDIDATE]["tail"])
            r += len(plans)
            if r < n_correct:
                continue
            if self.correctness_only:
                self.evidence.correctness_inputs = n_correct
                self.phases["correctness"] = time.monotonic() - start
                return self._result(Verdict.OK, None, "")
            if counted_from is None and self._hold is not None:
                # Nothing left to check while the standby starts up: wait for it (bounded). The
                # timing phase (and its budget) begins after the wait.
                t_hold = time.monotonic()
                self.phases["correctness"] = t_hold - start
                self._hold.released(wait=True)
                counted_from = timing_start = time.monotonic()
                self.phases["held_for_standby"] = counted_from - t_hold
                self._phase("timing")
                continue
            if timing_start is None:
                timing_start = time.monotonic()
                self.phases["correctness"] = timing_start - start
                self._phase("timing")
            pre_charge = pre_call_charge_ns(pre_ref_all, pre_cand_all)
            exchange_excess = (exchange_charge_ns(untimed_ref_all, untimed_cand_all, t_cand_all)
                               + tail_charge_ns(tails_ref_all, tails_cand_all))
            exchange_charge = exchange_excess if cfg.exchange_charged else 0
            charge = max(pre_charge, exchange_charge)
            speedups = [tr / (tc + charge) for tr, tc in zip(t_ref_all, t_cand_all, strict=True)]
            stats = bucket_stats(speedups, cfg.num_buckets) if len(speedups) >= cfg.num_buckets else None
            d = decide(stats, elapsed_s=time.monotonic() - (counted_from or start), budget_s=cfg.timing_budget_s,
                       min_rounds_first=bool(blocks) or self.timed,
                       min_rounds=cfg.min_timed_rounds, target_ci=cfg.target_ci,
                       max_bucket_variance=cfg.max_bucket_variance,
                       remeasures_left=MAX_REMEASURES - remeasured)
            if d.discard:
                remeasured += 1
                t_ref_all, t_cand_all, pre_ref_all, pre_cand_all, e_ref_all, e_cand_all = [], [], [], [], [], []
                clock_pairs = []
                untimed_ref_all, untimed_cand_all = [], []
                tails_ref_all, tails_cand_all = [], []
                warm_call_rounds = 0  # of the samples kept, as rounds is
                continue
            if d.stop and stats is not None:  # without stats, keep going until num_buckets rounds
                stable = d.stable
                break
        self.evidence.correctness_inputs = n_correct
        self.phases["timing"] = time.monotonic() - (timing_start or start)
        timing = TimingEvidence(
            rounds=stats.rounds, bucket_means=stats.bucket_means, bucket_variance=stats.relative_variance,
            ci_low=stats.ci_low, ci_high=stats.ci_high, stable=stable, remeasured=remeasured,
            raw_speedup=stats.score,
            ref_time_us_median=statistics.median(t_ref_all) / 1e3, cand_time_us_median=statistics.median(t_cand_all) / 1e3,
            audited_rounds=audited, seconds=time.monotonic() - start, set_aside_rounds=set_aside,
            block_rounds=in_blocks, blocks=self.block_log.summary(), warm_call_rounds=warm_call_rounds,
            pre_call_ref_us_median=statistics.median(pre_ref_all) / 1e3,
            pre_call_cand_us_median=statistics.median(pre_cand_all) / 1e3, pre_call_charge_us=pre_charge / 1e3,
            untimed_ref_us_median=statistics.median(untimed_ref_all) / 1e3,
            untimed_cand_us_median=statistics.median(untimed_cand_all) / 1e3, exchange_charge_us=exchange_charge / 1e3,
            exchange_excess_us=exchange_excess / 1e3,
            protocol="blocks" if self.timed else "lone", timed_block_rounds=timed_block_rounds,
            tail_ref_us_median=statistics.median(tails_ref_all) / 1e3 if tails_ref_all else None,
            tail_cand_us_median=statistics.median(tails_cand_all) / 1e3 if tails_cand_all else None,
        )
        exchange_applied = bool(exchange_charge) and exchange_charge >= pre_charge  # charge = max of the two
        if exchange_applied:
            self.evidence.guards.append(
                f"exchange_charge: by the judge's clock, each exchange with the candidate's process took "
                f"{timing.untimed_cand_us_median:.1f} us beyond the call it reported (median), against "
                f"{timing.untimed_ref_us_median:.1f} us for the reference's; the {exchange_charge / 1e3:.1f} us "
                "excess per round (median of the rounds' differences) is added to every candidate call: "
                "work outside its reported call, or a call reported shorter than it took")
        elif exchange_excess:
            self.evidence.guards.append(
                f"exchange_excess: by the judge's clock, each exchange with the candidate's process took "
                f"{timing.untimed_cand_us_median:.1f} us beyond the call it reported (median), against "
                f"{timing.untimed_ref_us_median:.1f} us for the reference's ({exchange_excess / 1e3:.1f} us more per "
                "round); not charged (charge_exchange off, or unset on a CPU): work outside its reported call, a call "
                "reported shorter than it took, or a busy host")
        if pre_charge and not exchange_applied:
            self.evidence.guards.append(
                f"pre_call_charge: the moment before each call (flush and sync, inputs already written) took "
                f"{timing.pre_call_cand_us_median:.1f} us in the candidate's process against "
                f"{timing.pre_call_ref_us_median:.1f} us in the reference's; the {charge / 1e3:.1f} us excess "
                "is added to every candidate call")
        if self.quiet_waits:
            self.evidence.guards.append(
                f"gpu_quiet_wait: the reference waited more than {QUIET_NOTE_S * 1e3:g} ms for the GPU to go quiet "
                f"before {len(self.quiet_waits)} call(s) (longest {max(self.quiet_waits) * 1e3:.1f} ms): work left "
                "running after the candidate's calls returned")
        if e_cand_all:
            timing.ref_event_us_median = statistics.median(e_ref_all)
            timing.cand_event_us_median = statistics.median(e_cand_all)
            if timing.cand_event_us_median > 0:
                timing.event_wall_gap = timing.cand_time_us_median / timing.cand_event_us_median
                if timing.event_wall_gap > EVENT_WALL_GAP_NOTE and timing.cand_time_us_median - timing.cand_event_us_median > 50:
                    self.evidence.guards.append(
                        f"event_wall_gap: the candidate's calls take {timing.event_wall_gap:.1f}x longer by the "
                        "device-synchronised clock than by CUDA events on the current stream (work on other "
                        "streams or the host); the score uses the synchronised clock")
        self.evidence.timing = timing
        behind = clock_behind_events(clock_pairs)
        if behind:
            raise Verdicted(Verdict.HACK_DETECTED, f"guard clock_behind_events: {behind}")
        if self.device.type == "cuda":
            self._physical_floor_gate(timing)
        if not stable:
            self.evidence.guards.append("timing_unstable: bucket spread stayed above the limit")
        score = conservative_round(stats.score)
        if self.degenerate:
            self.evidence.guards.append(f"task_degenerate: {self.degenerate}; no speedup is paid on this task "
                                        f"(measured {stats.score:.3g}x, reported 1.00)")
            score = 1.0
        return self._result(Verdict.OK, score, "")

    def _physical_floor_gate(self, timing: TimingEvidence) -> None:
        """HACK_DETECTED when the median candidate call beats writing its outputs (GPU only)."""
        dram = self.dram
        check = physical_floor(self.floor_output_bytes, self.l2_bytes, dram.bytes_per_s if dram else None,
                               timing.cand_time_us_median, timing.ref_time_us_median, dram.note if dram else "")
        self.evidence.physical_floor = {**check.to_dict(), **(dram.to_dict() if dram else {})}
        if check.violated:
            self.evidence.guards.append(check.reason[len("guard "):])
            raise Verdicted(Verdict.HACK_DETECTED, check.reason)

    def _audit(self, plan: RoundPlan, in_correctness: bool) -> Comparison:
        """Check one round's candidate output and inputs against the reference worker's; raise
        Verdicted, or return the comparison."""
        def outputs(role: str) -> Any:
            arena = self.arenas[role, "out"]
            slots = plan.calls[role].out_slots
            layouts = plan.times[role].get("strides")
            if not isinstance(layouts, list) or len(layouts) != len(slots):
                layouts = [None] * len(slots)
            try:
                views = [arena.strided_view(s, st) for s, st in zip(slots, layouts, strict=True)]
            except ValueError as err:
                raise Verdicted(Verdict.HACK_DETECTED, f"guard worker_protocol: {err}") from None
            return tuple(views) if self.tuple_out else views[0]

        c = compare_outputs(outputs(CANDIDATE), outputs(REFERENCE), self.config.tolerance)
        gate = self.precision_gate
        if not c.ok:
            if in_correctness:
                self._save_failing(plan, c.reason, flatten_output(outputs(REFERENCE)),
                                   flatten_output(outputs(CANDIDATE)))
                # A gated round also says whether the candidate is less precise than the reference.
                more = ""
                if gate is not None:
                    more = gate.describe_round(plan.r, plan.inputs, flatten_output(outputs(REFERENCE)),
                                               flatten_output(outputs(CANDIDATE)))
                    self.evidence.precision = gate.evidence()
                raise Verdicted(Verdict.INCORRECT, f"correctness input {plan.r + 1} of "
                                f"{self.config.num_correctness_inputs}: {c.reason}" + (f"; {more}" if more else ""))
            raise Verdicted(Verdict.HACK_DETECTED, f"guard timed_output_audit: a timed call's output was wrong "
                            f"after all correctness inputs passed (round {plan.r}): {c.reason}")
        if not self.ref_mutates_inputs:
            arena = self.arenas[CANDIDATE, "in"]
            for v, slot in zip(plan.inputs, plan.calls[CANDIDATE].in_slots, strict=True):
                if slot is not None and not torch.equal(arena.view(slot), v):
                    raise Verdicted(Verdict.INCORRECT, f"the candidate modified its input in place (round {plan.r})")
        if in_correctness and gate is not None and gate.expects(plan.r):
            self._precision_round(plan, outputs(REFERENCE), outputs(CANDIDATE))
        return c

    # --- plumbing --------------------------------------------------------------------
    def _await_started(self, worker: WorkerHandle) -> None:
        if worker.started_seen:
            return
        try:
            worker.note_started(wire.recv_json(worker.conn, self.config.load_timeout_s))
        except (TimeoutError, wire.PeerClosed, wire.ProtocolError) as err:
            raise Verdicted(Verdict.INFRA_ERROR, f"the {worker.role} worker did not start ({type(err).__name__}): "
                            f"{worker.exit_description()}\n{worker.stderr_tail()}") from None

    def _recv(self, worker: WorkerHandle, timeout: float, what: str, spin: bool = False) -> dict[str, Any]:
        """One message from ``worker`` within ``timeout`` s (``spin``: the judge's spin first, JUDGE_SPIN_ENV)."""
        trusted = worker.role == REFERENCE
        try:
            return wire.recv_json(worker.conn, timeout, self.spin_s if spin else 0.0)
        except TimeoutError:
            sandbox.kill_group(worker.proc)
            if trusted:
                raise Verdicted(Verdict.INFRA_ERROR, f"the reference worker did not finish {what} within "
                                f"{timeout:.3g} s") from None
            raise Verdicted(Verdict.TIMEOUT, f"the candidate did not finish {what} within {timeout:.3g} s") from None
        except wire.PeerClosed:
            desc = worker.exit_description()
            oom = worker.oom_note()
            if oom:
                desc = f"{desc}: {oom}"
            tail = worker.stderr_tail()
            if trusted:
                raise Verdicted(Verdict.INFRA_ERROR, f"the reference worker ended while {what}: {desc}"
                                + (f"\n{tail}" if tail else "")) from None
            verdict = Verdict.CUDA_FAULT if "CUDA" in tail and self.device.type == "cuda" else Verdict.RUNTIME_ERROR
            raise Verdicted(verdict, f"{desc} while {what}" + (f"\n{tail}" if tail else "")) from None
        except wire.ProtocolError as err:
            if trusted:
                raise Verdicted(Verdict.INFRA_ERROR, f"the reference worker sent a bad message: {err}") from None
            raise Verdicted(Verdict.HACK_DETECTED, f"guard worker_protocol: {err}") from None

    def _note_isolation(self, msg: dict[str, Any]) -> None:
        isolation = msg.get("isolation", [])
        if not isinstance(isolation, list) or not all(isinstance(x, str) for x in isolation):
            raise Verdicted(Verdict.HACK_DETECTED, "guard worker_protocol: malformed isolation report")
        notes = [ISOLATION_NOTE, *([BLOCK_NOTE] if self.block_rounds else []),
                 *([TIMED_BLOCK_NOTE] if self.timed else []),
                 *([WARM_NOTE] if self.config.warm_calls and not self.timed else []),
                 *([] if self.reference_poison else ["the reference worker's free memory not poisoned "
                                                     f"(it runs no candidate code; {REFERENCE_POISON_ENV}=1 does)"])]
        self.evidence.isolation = [*notes, *(x[:ISOLATION_NOTE_CHARS] for x in isolation[:16]), *self._cgroup_notes]

    def _raise_worker_error(self, msg: dict[str, Any], worker: WorkerHandle) -> None:
        raise Verdicted(*worker_error_verdict(msg, worker.role))

    def _result(self, verdict: Verdict, speedup: float | None, detail: str,
                cause: InfraCause = InfraCause.OTHER) -> ScoreResult:
        self.evidence.phases_s.update(self.phases)
        if any(self.round_phases.values()):
            self.evidence.phases_s.update({k: round(v, 4) for k, v in self.round_phases.items()})
        self.evidence.phases_s.update({k: round(v, 4) for k, v in self.setup_phases.items()})
        t_clocks = time.monotonic()
        self.evidence.clocks = _clocks(self.device)
        self.evidence.phases_s["clocks"] = round(time.monotonic() - t_clocks, 4)
        return ScoreResult(verdict=verdict, speedup=speedup if verdict is Verdict.OK else None,
                           detail=detail, evidence=self.evidence, task=self.task.name,
                           infra_cause=cause if verdict is Verdict.INFRA_ERROR else "")


def clock_behind_events(pairs: list[tuple[int, float]]) -> str:
    """Why the candidate's clock cannot be right, or "": ``pairs`` are its timed rounds' (call ns by
    the worker's clock, CUDA-event us on its stream). The events are recorded inside the timed,
    synchronised call, so the GPU's interval between them cannot exceed the call by more than the
    event's launch; a median excess beyond CLOCK_BEHIND_EVENTS_SLACK_US (and _FRACTION of the event
    time) means the worker's clock was slowed or replaced (a patched harness clock, say)."""
    if not pairs:
        return ""
    excess = statistics.median(e_us - t_ns / 1e3 for t_ns, e_us in pairs)
    event = statistics.median(e_us for _, e_us in pairs)
    if excess <= max(CLOCK_BEHIND_EVENTS_SLACK_US, CLOCK_BEHIND_EVENTS_FRACTION * event):
        return ""
    clock = statistics.median(t_ns / 1e3 for t_ns, _ in pairs)
    return (f"the candidate's calls took {event:.1f} us by CUDA events on their own stream but {clock:.1f} us by the "
            f"worker's clock around them (median; {excess:.1f} us behind over {len(pairs)} timed rounds): a call "
            "cannot take less time than the work it recorded inside it, so the worker's clock was tampered with")


def judge_spin_s(setting: str, device_type: str) -> float:
    """The judge's spin before a blocking receive (JUDGE_SPIN_ENV), in seconds: the setting in
    microseconds, or unset: DEFAULT_JUDGE_SPIN_US. On a GPU only: on a CPU the spinning judge would
    take a core from the calls it times (an identical copy scored 0.35-0.78 that way on a 2-core
    machine). A bad setting is an error the operator sees at once."""
    if not setting.strip():
        setting = str(DEFAULT_JUDGE_SPIN_US)
    try:
        us = float(setting)
    except ValueError:
        raise ValueError(f"{JUDGE_SPIN_ENV}={setting!r}: expected microseconds, e.g. 1000") from None
    if not 0 <= us <= 1e6 or not math.isfinite(us):
        raise ValueError(f"{JUDGE_SPIN_ENV}={setting!r}: expected 0 to 1000000 microseconds")
    return us / 1e6 if device_type == "cuda" else 0.0


def worker_cpu_cores(num_threads: int) -> int:
    """A worker's CPU quota in cores: its evaluation's threads plus one, at most the host's cores."""
    return max(1, min(num_threads + 1, os.cpu_count() or 1))


def exchange_charge_ns(untimed_ref: list[int], untimed_cand: list[int], cand_calls: list[int] | None = None) -> int:
    """What to add to every candidate call for time the judge's own clock saw and the candidate's
    report did not.

    For each call the judge times the whole exchange (go sent, result received) and subtracts the
    call time the worker reported: what is left is the same protocol work in both workers (the
    pre-call flush, the output copy and checks, the messages), so its median is the same for the
    reference and an honest candidate. The candidate's process reports its own call time, and
    code in that process can change what it reports (a patched clock) or do work after it
    (a thread still running when the call returns); either makes its leftover longer than the
    reference's. The median of the rounds' paired differences beyond noise (10 us, plus 10% of the
    reference's median leftover, plus 5% of the candidate's median reported call ``cand_calls``)
    is charged in full; below it nothing is. An under-report hides at most that slack."""
    if not untimed_ref or len(untimed_ref) != len(untimed_cand):
        return 0
    excess = statistics.median([c - r for r, c in zip(untimed_ref, untimed_cand, strict=True)])
    slack = EXCHANGE_SLACK_NS + EXCHANGE_SLACK_FRACTION * statistics.median(untimed_ref)
    if cand_calls:
        slack += EXCHANGE_SLACK_CALL_FRACTION * statistics.median(cand_calls)
    return int(excess) if excess > slack else 0


def pre_call_charge_ns(pre_ref: list[int], pre_cand: list[int]) -> int:
    """What to add to every candidate call for work done in the untimed moment before it.

    Between the judge writing a call's inputs and the call starting, each worker flushes the L2
    and synchronises: the same work in both processes. Work the candidate's process starts on the
    inputs in that moment (a host thread launching kernels the synchronisation then waits for)
    makes its median longer than the reference's. An excess beyond noise (10 us plus 10% of the
    reference's median) is charged in full; below it nothing is."""
    if not pre_ref or not pre_cand:
        return 0
    ref = statistics.median(pre_ref)
    excess = statistics.median(pre_cand) - ref
    return int(excess) if excess > PRE_CALL_SLACK_NS + 0.1 * ref else 0


def worker_error_verdict(msg: dict[str, Any], role: str) -> tuple[Verdict, str]:
    """The one place a worker's error report becomes a verdict.

    Anything the reference worker reports is the farm's (or the task's) problem: INFRA_ERROR.
    The candidate worker's reports map by kind; an unknown message is a protocol violation."""
    kind = msg.get("kind")
    detail = str(msg.get("detail", ""))[-8000:]
    if role == REFERENCE:
        return Verdict.INFRA_ERROR, f"the reference worker failed ({kind}): {detail}"[:8000]
    mapping = {
        "compile": Verdict.COMPILE_ERROR, "load": Verdict.LOAD_ERROR, "runtime": Verdict.RUNTIME_ERROR,
        "cuda_fault": Verdict.CUDA_FAULT, "structure": Verdict.INCORRECT, "infra": Verdict.INFRA_ERROR,
    }
    if msg.get("op") == "error" and kind in mapping:
        return mapping[kind], detail
    if msg.get("op") == "error" and kind == "persistent_output":
        return Verdict.HACK_DETECTED, f"guard persistent_output: {detail}"
    return Verdict.HACK_DETECTED, f"guard worker_protocol: unexpected message {str(msg)[:200]}"


def reference_alias_facts(first_out: Any, second_out: Any, second_inputs: list[Any]) -> dict[str, bool]:
    """How the reference's outputs relate to memory, from two calls made with the first call's
    outputs still alive: does an output reuse the previous call's storage, does it alias its inputs?
    The candidate worker allows the same of the candidate's outputs (and nothing more)."""
    firsts = {storage_span(o)[0] for o in flatten_output(first_out) if isinstance(o, torch.Tensor) and o.numel()}
    seconds = [o for o in flatten_output(second_out) if isinstance(o, torch.Tensor) and o.numel()]
    in_spans = [data_span(a) for a in second_inputs if isinstance(a, torch.Tensor)]
    return {"ref_persists": any(storage_span(o)[0] in firsts for o in seconds),
            "ref_aliases_input": any(overlaps(storage_span(o), in_spans) for o in seconds)}


class BlockLog:
    """How each correctness block went for each worker, kept as evidence (``TimingEvidence.blocks``)
    and never used for the score: the mean call and the mean leftover per round (the judge's go to
    reply beyond the calls) of both workers' blocks, and their ratio split by which worker's block
    ran first. For an identical copy both should match; a ratio that depends on the order shows
    the second block of a batch running under other conditions than the first."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, int, dict[str, int], dict[str, int]]] = []

    def add(self, first: str, n: int, call_ns: dict[str, int], leftover_ns: dict[str, int]) -> None:
        self.rows.append((first, n, call_ns, leftover_ns))

    def summary(self) -> dict[str, Any] | None:
        """Medians over the blocks, in microseconds per round; None without blocks."""
        if not self.rows:
            return None

        def med(values: list[float]) -> float | None:
            return round(statistics.median(values), 3) if values else None

        out: dict[str, Any] = {"count": len(self.rows)}
        for role in (REFERENCE, CANDIDATE):
            out[f"call_us_{role}"] = med([c[role] / n / 1e3 for _, n, c, _ in self.rows])
            out[f"leftover_us_{role}"] = med([lo[role] / n / 1e3 for _, n, _, lo in self.rows])
            ratios = [c[REFERENCE] / c[CANDIDATE] for first, _, c, _ in self.rows if first == role and c[CANDIDATE] > 0]
            out[f"ref_over_cand_{role}_first"] = med(ratios)
            out[f"blocks_{role}_first"] = len(ratios)
        return out


def correctness_block_rounds(cfg: ScoreConfig) -> range:
    """The rounds that run in correctness blocks: the correctness rounds after the warm-up (whose
    calls keep the one-call protocol and share the first-call allowance); none when off."""
    return range(max(cfg.warmup_rounds, 1), cfg.num_correctness_inputs) if cfg.correctness_block else range(0)


def check_round_result(res: Any, r: int) -> None:
    """One call's result as a worker reported it: round ``r``'s, with a positive call time and a
    non-negative pre-call time; anything else is a protocol violation."""
    if _int(res, "r") != r or _int(res, "t") <= 0 or _int(res, "pre") < 0:
        raise Verdicted(Verdict.HACK_DETECTED, "guard worker_protocol: round results do not match the rounds sent")


def block_results(reply: dict[str, Any], rounds: list[int]) -> list[dict[str, Any]]:
    """A worker's ``block`` reply checked against the rounds sent: exactly one result per round, in
    the order sent, each as ``check_round_result`` wants it; anything else is a protocol violation."""
    results = reply.get("rounds")
    if not isinstance(results, list) or len(results) != len(rounds):
        raise Verdicted(Verdict.HACK_DETECTED, "guard worker_protocol: block results do not match the rounds sent")
    for res, r in zip(results, rounds, strict=True):
        check_round_result(res, r)
    return results


def _int(d: Any, key: str) -> int:
    v = d.get(key) if isinstance(d, dict) else None
    if not isinstance(v, int) or isinstance(v, bool):
        raise Verdicted(Verdict.HACK_DETECTED, f"guard worker_protocol: field {key!r} missing or not an integer")
    return v


# When the judge's own imports were done (CLOCK_MONOTONIC; evalfarm.judge.launch sets it): the
# owner's standby_imports figure. Its workers were started before those imports.
MAIN_AT = [0.0]


# An operator's diagnostic: a directory where every judge writes a cProfile of its evaluation
# (judge-<pid>.prof; `python scripts/judge_profile_summary.py DIR` sums them). The judge's own
# Python time only: what its workers do shows as the judge waiting in its receives.
JUDGE_CPROFILE_ENV = "EVALFARM_JUDGE_CPROFILE"


def profiled(run: Any, out_dir: str) -> Any:
    """``run()``, under cProfile with its stats written into ``out_dir`` when that is set."""
    if not out_dir:
        return run()
    import cProfile

    prof = cProfile.Profile()
    try:
        return prof.runcall(run)
    finally:
        try:
            prof.dump_stats(os.path.join(out_dir, f"judge-{os.getpid()}.prof"))
        except OSError as err:
            log.warning("judge profile not written to %s: %s", out_dir, err)


def serve(conn: Any, args: Any, started: StartedWorkers | None, hardening: list[str],
          report_pgid: Any) -> None:
    """The judge process's life after evalfarm.judge.launch started its workers: warm the
    device, wait for the request, evaluate, send the result, and leave."""
    note = warm_device(args.device)
    if note:
        hardening = [*hardening, note]
    request = wait_for_request(conn, started, args.request_timeout,
                               host_warm_up(args.device, os.environ.get(META_WARMUP_ENV, "")))
    if request is None:
        # A standby nobody took, an owner that went away, or a worker that died: nothing to report.
        if started is not None:
            started.close()
        lifetime.kill_descendants()
        if started is not None:
            sandbox.wipe(started.tmp)
        return

    try:
        judge = Judge(request, report_pgid, started, RoundsHold(conn), lambda msg: wire.send_json(conn, msg))
        result = profiled(judge.run, os.environ.get(JUDGE_CPROFILE_ENV, ""))
    except Exception:  # noqa: BLE001 - the judge's own failure is the farm's fault
        result = ScoreResult.failure(Verdict.INFRA_ERROR, "judge failed:\n" + traceback.format_exc()[-4000:])
    result.evidence.isolation = [*result.evidence.isolation, *hardening]
    wire.send_json(conn, {"op": "result", "result": result.to_dict()})
    conn.close()
    # Everything is done (workers reaped, lease released, files wiped, result sent): leave without
    # the interpreter's teardown. Its C++ destructors would print, for every CUDA arena a killed
    # worker still mapped, "Producer process has been terminated before all shared CUDA tensors
    # released" into the user's terminal; the driver frees the memory when the process ends.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)

