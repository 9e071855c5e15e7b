"""The set-up: the task and its reference measured, the arenas sized, the workers loaded.

The rule. Everything before the first round is the farm's: no candidate code has run until the
candidate worker loads, so any failure up to then (the task, the reference, memory, a worker that
does not start) is INFRA_ERROR. The judge builds the task's Model in its own process, calls it twice
(the second call, warm, is the first estimate of the reference's call: evalfarm.judge.bounds) and
learns from those calls what the candidate may do with memory (``reference_alias_facts``), the
outputs' structure, and whether the task is degenerate; the precision gate's ground truths and one
call's FLOPs come next (``set_up_precision``). The rounds' arenas are sized to the memory left
(``allocate_arenas``), and whether the timed rounds run in timed blocks is decided there, before
both workers load (``load_messages``): the candidate worker gets what the reference showed
(its alias facts), the arenas' handles, and the extensions the build pool staged for it; what it
loaded is checked statically, from the cache, never from the worker (``check_symbols``).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch

from evalfarm.compare import flatten_output
from evalfarm.config import ScoreConfig
from evalfarm.devices import DramPeak, dram_peak
from evalfarm.infra_cause import InfraCause
from evalfarm.judge import framing, gpu_lease, precision, roofline
from evalfarm.judge.arena import Arena, aligned
from evalfarm.judge.blame import Verdicted
from evalfarm.judge.correctness import min_block_rounds
from evalfarm.judge.floor import FloorFacts
from evalfarm.judge.inputs import InputSource
from evalfarm.judge.memory_plan import MemoryGate, TaskTooLarge, out_of_memory_reason
from evalfarm.judge.reference_memo import ReferenceMemo
from evalfarm.judge.roles import CANDIDATE, EXT_DIR, REFERENCE
from evalfarm.judge.staging import JudgeStaging, StagingLayout
from evalfarm.judge.task_facts import valid_footprint
from evalfarm.judge.timed_blocks import MIN_BLOCK_CALLS, STAGING_MAX_BYTES
from evalfarm.judge.worker import data_span, overlaps, storage_span
from evalfarm.judge.worker_processes import WorkerHandle
from evalfarm.result import Evidence
from evalfarm.tasks.format import Task, instantiate_task
from evalfarm.tasks.lint import degenerate_reason
from evalfarm.verdict import Verdict

log = logging.getLogger("evalfarm.judge")

# The four input/output arenas together, per batch of rounds. On a GPU a share of the device's
# memory, between the two bounds: more rounds per batch mean fewer exchanges with each worker (on
# an H200, L1/1 at its default size spent 4.8 s on 1000 correctness inputs at 4 rounds per batch,
# 3.8 s at 16: docs/benchmarks.md). The memory plan still makes a batch smaller where it would not
# fit what is free (``MemoryPlan.before_rounds``).
ARENA_BUDGET_CPU_BYTES = 256 << 20
ARENA_BUDGET_CUDA_SHARE = 1 / 16
ARENA_BUDGET_CUDA_BOUNDS = (1 << 30, 8 << 30)
MAX_ROUNDS_PER_BATCH = 32
# A timed batch's inputs are copied to the judge's host memory (page-locked) before its blocks:
# at most this many bytes of them (but at least MIN_BLOCK_CALLS rounds), so a large batch of
# correctness rounds never pins gigabytes of host memory per slot.
TIMED_BATCH_HOST_BYTES = 1 << 30


def arena_budget(device_type: str, total_bytes: int = 0, override_bytes: int = 0) -> int:
    """The bytes the four input/output arenas may take together: the operator's
    ``override_bytes`` where given (evalfarm.judge.exchange.ARENA_BUDGET_ENV); on a GPU of
    ``total_bytes`` of memory, ``ARENA_BUDGET_CUDA_SHARE`` of it within ``ARENA_BUDGET_CUDA_BOUNDS``;
    on a CPU ``ARENA_BUDGET_CPU_BYTES``."""
    if override_bytes:
        return override_bytes
    if device_type != "cuda":
        return ARENA_BUDGET_CPU_BYTES
    low, high = ARENA_BUDGET_CUDA_BOUNDS
    return int(min(high, max(low, total_bytes * ARENA_BUDGET_CUDA_SHARE)))


def timed_rounds_per_batch(rounds_per_batch: int, in_bytes: int) -> int:
    """The rounds of a timed batch: the batch's, at most ``TIMED_BATCH_HOST_BYTES`` of inputs, at
    least ``MIN_BLOCK_CALLS`` (where the batch holds that many)."""
    fit = max(MIN_BLOCK_CALLS, TIMED_BATCH_HOST_BYTES // max(in_bytes, 1))
    return max(1, min(rounds_per_batch, fit))

# mark(name): the set-up's time since the previous mark into the set-up phases (SetupClock).
Mark = Callable[[str], None]


class SetupClock:
    """``mark(name)``: the time since the previous mark (``t0`` at first) into ``phases``."""

    def __init__(self, t0: float, phases: dict[str, float]) -> None:
        self.last = t0
        self.phases = phases

    def __call__(self, name: str) -> None:
        now = time.monotonic()
        self.phases[name] = self.phases.get(name, 0.0) + now - self.last
        self.last = now


def take_gpu_lease(device: torch.device, timeout_s: float, notify: Any) -> gpu_lease.GpuLease:
    """Hold this GPU alone for the whole evaluation (evalfarm.judge.gpu_lease): from before the
    reference's first call to after the workers are killed. The owner is told of a wait
    (``notify``, or None), so it is not charged to the candidate."""
    uuid, pci = cuda_identity(torch.cuda.get_device_properties(device))
    gpu = uuid or (f"pci-{pci[0]:04x}-{pci[1]:02x}-{pci[2]:02x}" if pci is not None
                   else f"visible-{os.environ.get('CUDA_VISIBLE_DEVICES', '0')}")

    told: list[str] = []

    def waiting(holders: str) -> None:
        told.append(holders)
        log.info("waiting for GPU %s: leased by %s", gpu, holders)
        if notify is not None:
            notify({"op": "gpu_lease_wait", "holders": holders})

    try:
        lease = gpu_lease.acquire(gpu, timeout_s, on_wait=waiting)
    except gpu_lease.LeaseTimeout as err:
        raise Verdicted(Verdict.INFRA_ERROR, str(err)) from None
    except OSError as err:
        raise Verdicted(Verdict.INFRA_ERROR, f"the GPU lease file could not be opened: {err} (set "
                        f"${gpu_lease.LEASE_DIR_ENV} to a directory every evaluation on this host can use)") from None
    if told and notify is not None:  # the owner's clock resumes
        notify({"op": "gpu_lease", "waited_s": lease.waited_s})
    return lease


@dataclasses.dataclass
class Reference:
    """What the set-up learnt from the task and its reference's first calls."""

    source: InputSource
    memory: MemoryGate
    init_inputs: list[Any]
    weight_seed: int
    t_ref: float  # the warm second call, seconds: the first estimate (evalfarm.judge.bounds)
    mutates_inputs: bool  # the reference writes into its own inputs
    alias_facts: dict[str, bool]  # reference_alias_facts
    tuple_out: bool
    out_struct: list[tuple[tuple[int, ...], torch.dtype]]
    degenerate: str  # evalfarm.tasks.lint's reason, or ""
    # Why a window may not keep its outputs for later candidates (evalfarm.judge.reference_memo):
    # its first two calls on the same inputs gave different outputs (an output that depends on
    # earlier calls or on randomness, or is not bitwise repeatable), or the task's inputs drawn
    # twice for one round differed (``inputs_not_repeatable``); "" where neither was seen.
    not_repeatable: str = ""


def set_up_reference(task: Task, profile: str, device: torch.device, task_facts: dict[str, Any],
                     evidence: Evidence, mark: Mark, correctness_only: bool = False) -> tuple[Reference, Any]:
    """The task's Model built and called twice, its outputs' structure and memory facts learnt, the
    degenerate-output check made (not for ``correctness_only``: it decides only whether a speedup
    is paid); returns them and the model. Any failure is the task's (INFRA_ERROR)."""
    memory = MemoryGate(device)
    try:
        task_mod = instantiate_task(task, profile)
        source = InputSource(task_mod, str(device))
        init_inputs = source.init_inputs()
        # TaskTooLarge before anything large exists
        memory.before_setup(task_mod, init_inputs, valid_footprint(task_facts.get("footprint")))
        weight_seed = source.weight_seed()
        torch.manual_seed(weight_seed)
        ref_model = task_mod.Model(*init_inputs).to(device)
        mark("setup_task")
        # Lean for full-size tasks (memory_plan.setup_bytes): at most two input sets and one
        # kept output at a time; the same inputs are drawn again rather than cloned.
        sample = source.inputs(-1)
        held, _ = ref_call(device, ref_model, sample)
        again = source.inputs(-1)
        mutates_inputs = any(
            isinstance(a, torch.Tensor) and not torch.equal(a, b) for a, b in zip(sample, again, strict=False))
        del sample
        ref_out, t_ref = memory.measured_call(
            lambda m=ref_model, s=again: ref_call(device, m, s))  # second call: warm
        facts = reference_alias_facts(held, ref_out, again)
        not_repeatable = "" if same_outputs(held, ref_out) else (
            "the reference's two set-up calls on the same inputs gave different outputs")
        del held, again
        check_ref_output(ref_out)
        tuple_out = isinstance(ref_out, tuple | list)
        out_struct = [(tuple(o.shape), o.dtype) for o in flatten_output(ref_out)]
        del ref_out
        mark("setup_reference")
        degenerate = "" if correctness_only else degenerate_reason(
            lambda inputs, m=ref_model: m(*inputs), [lambda i=i: source.inputs(i) for i in (-1, -2, -3)])
        mark("setup_lint")
    except Verdicted:
        raise
    except TaskTooLarge as err:
        evidence.memory = memory.evidence()
        raise Verdicted(Verdict.INFRA_ERROR, str(err), InfraCause.TASK_TOO_LARGE) from None
    except torch.cuda.OutOfMemoryError as err:
        raise Verdicted(Verdict.INFRA_ERROR, out_of_memory_reason(
            err, device, memory.footprint, "while the judge ran the reference"), InfraCause.TASK_TOO_LARGE) from None
    except Exception:  # noqa: BLE001 - the task itself is broken: not the candidate's fault
        raise Verdicted(Verdict.INFRA_ERROR, "the task failed to run:\n" + traceback.format_exc()[-4000:]) from None
    return Reference(source, memory, init_inputs, weight_seed, t_ref, mutates_inputs, facts, tuple_out,
                     out_struct, degenerate, not_repeatable), ref_model


# The input indices drawn to see whether the task's draws depend on anything but their seed: never
# a round's (0, 1, ...), the set-up's (-1 to -3) or the diagnostics' (-4, -5).
REPEAT_CHECK_INDICES = (-6, -7)


def inputs_not_repeatable(source: InputSource) -> str:
    """Why the task's inputs for one round may differ from one draw to the next ("" where round
    ``REPEAT_CHECK_INDICES[0]`` drawn, then another round, then it again, gave the same values):
    a get_inputs with state of its own (a counter, a cache) would give a later candidate of a
    window other inputs than the reference outputs kept for that round."""
    first = source.inputs(REPEAT_CHECK_INDICES[0])
    source.inputs(REPEAT_CHECK_INDICES[1])
    again = source.inputs(REPEAT_CHECK_INDICES[0])
    same = len(first) == len(again) and all(
        same_outputs(a, b) if isinstance(a, torch.Tensor) else (type(a) is type(b) and a == b)
        for a, b in zip(first, again, strict=True))
    return "" if same else "the task's inputs for one round differed from one draw to the next"


def same_outputs(first: Any, second: Any) -> bool:
    """Whether two calls' outputs are the same tensors bit for bit (a NaN anywhere: not the same;
    outputs that share storage compare equal, which is what such a reference gives every call)."""
    a, b = flatten_output(first), flatten_output(second)
    return len(a) == len(b) and all(
        isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.shape == y.shape and x.dtype == y.dtype
        and bool(torch.equal(x, y)) for x, y in zip(a, b, strict=True))


# A correctness-only evaluation (evalfarm.other_sizes' check at another size) pays nothing and
# times nothing: no roofline (evidence of timed results only) and no precision gate (it applies
# where the speedup is measured; reduced precision at another size earns no reward).
CORRECTNESS_ONLY_PRECISION = ("correctness-only check at another size: the gate applies to the evaluation "
                              "at the scored size")


def set_up_precision(model: Any, source: InputSource, out_struct: list[tuple[tuple[int, ...], torch.dtype]],
                     device: torch.device, cfg: ScoreConfig, rng: Any, mark: Mark, correctness_only: bool = False,
                     ) -> tuple[precision.PrecisionGate | None, roofline.Counts, dict[str, Any]]:
    """One reference call's FLOPs and bytes (evalfarm.judge.roofline), then the precision gate's
    float64 ground truths of its rounds (evalfarm.judge.precision), which converts ``model``
    to float64. Neither is ever a verdict: a failure is a note in the evidence. Returns the gate
    (None: not applied), the counts and ``evidence.precision``. ``correctness_only``: neither
    (``CORRECTNESS_ONLY_PRECISION``), the counts empty and ``model`` left as it is."""
    if correctness_only:
        mark("setup_roofline")
        mark("setup_precision")
        return None, roofline.Counts(None, {}, None, "not counted: correctness only"), \
            precision.not_applied(CORRECTNESS_ONLY_PRECISION)
    counts = roofline.count(model, source.inputs(-1), out_struct)
    mark("setup_roofline")
    gate, ev = precision_gate(model, source, out_struct, device, cfg, rng, counts.flops)
    mark("setup_precision")
    return gate, counts, ev


def precision_gate(model: Any, source: InputSource, out_struct: list[tuple[tuple[int, ...], torch.dtype]],
                   device: torch.device, cfg: ScoreConfig, rng: Any, flops: float | None, on_device: bool = False
                   ) -> tuple[precision.PrecisionGate | None, dict[str, Any]]:
    """The precision gate and ``evidence.precision`` (evalfarm.judge.precision.prepare: ``model``
    converted to float64 in place); never a verdict: a failure is a note. ``on_device``: move
    ``model`` to ``device`` first (a failure there is a note too)."""
    reason = precision.not_applied_reason(cfg.precision, cfg.guard_policy, [d for _s, d in out_struct])
    if reason:
        return None, precision.not_applied(reason)
    try:
        if on_device:
            model.to(device)
        # prepare registers no widened rounds on ``source`` when it fails
        gate, ev = precision.prepare(model, source, out_struct, device, cfg.num_correctness_inputs, rng, flops)
    except Exception as err:  # noqa: BLE001 - the farm's problem, never the candidate's
        return None, precision.not_applied(f"no float64 ground truth: {type(err).__name__}: {str(err)[:300]}")
    return gate, (gate.evidence() if gate is not None else ev)


@dataclasses.dataclass
class TaskSetup:
    """What a judge learnt of its task and keeps across a task window (evalfarm.judge.task_window):
    nothing of it depends on a candidate or on the inputs' secret."""

    key: str  # evalfarm.judge.task_window.request_key of the request it was made for
    profile: str
    reference: Reference  # its ``source`` is replaced by a fresh one for every candidate
    model64: Any  # the reference model in float64, kept on the host (None: no precision gate)
    counts: roofline.Counts
    floor: FloorFacts
    flush_bytes: int
    setup_s: float  # what the first candidate's set-up took: what each later one is spared
    # The window's shared correctness secret and kept reference outputs (None: every candidate
    # draws its own inputs and the reference runs every round): evalfarm.judge.reference_memo.
    memo: ReferenceMemo | None = None


def refresh_precision(setup: TaskSetup, source: InputSource, device: torch.device, cfg: ScoreConfig, rng: Any,
                      mark: Mark, correctness_only: bool = False) -> tuple[precision.PrecisionGate | None, dict[str, Any]]:
    """The precision gate for a later candidate of a window: the kept float64 model on the device
    again, ground truths computed from this candidate's own inputs, the model back on the host
    (``correctness_only``: none, as in ``set_up_precision``)."""
    model = setup.model64
    out_struct = setup.reference.out_struct
    if correctness_only:
        mark("setup_precision")
        return None, precision.not_applied(CORRECTNESS_ONLY_PRECISION)
    if model is None:
        reason = precision.not_applied_reason(cfg.precision, cfg.guard_policy, [d for _s, d in out_struct])
        mark("setup_precision")
        return None, precision.not_applied(reason or "no float64 model kept for this task")
    try:
        gate, ev = precision_gate(model, source, out_struct, device, cfg, rng, setup.counts.flops, on_device=True)
    finally:
        model.to("cpu")
        if device.type == "cuda":
            torch.cuda.empty_cache()
    mark("setup_precision")
    return gate, ev


def cuda_identity(props: Any) -> tuple[str | None, tuple[int, int, int] | None]:
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


def tensors_bytes(values: list[Any]) -> int:
    return sum(aligned(v.numel() * v.element_size()) for v in values if isinstance(v, torch.Tensor))


def check_ref_output(out: Any) -> None:
    for o in flatten_output(out):
        if not isinstance(o, torch.Tensor):
            raise Verdicted(Verdict.INFRA_ERROR, f"the task's Model returned {type(o).__name__}, not tensors")


def reference_alias_facts(first_out: Any, second_out: Any, second_inputs: list[Any]) -> dict[str, bool]:
    """How the reference's outputs relate to memory, from two calls made with the first call's
    outputs still alive: does an output reuse the previous call's storage, does it alias its inputs?
    The candidate worker allows the same of the candidate's outputs (and nothing more)."""
    firsts = {storage_span(o)[0] for o in flatten_output(first_out) if isinstance(o, torch.Tensor) and o.numel()}
    seconds = [o for o in flatten_output(second_out) if isinstance(o, torch.Tensor) and o.numel()]
    in_spans = [data_span(a) for a in second_inputs if isinstance(a, torch.Tensor)]
    return {"ref_persists": any(storage_span(o)[0] in firsts for o in seconds),
            "ref_aliases_input": any(overlaps(storage_span(o), in_spans) for o in seconds)}


def worker_cpu_cores(num_threads: int) -> int:
    """A worker's CPU quota in cores: its evaluation's threads plus one, at most the host's cores."""
    return max(1, min(num_threads + 1, os.cpu_count() or 1))


def ref_call(device: torch.device, model: Any, inputs: list[Any]) -> tuple[Any, float]:
    """One reference call in the judge's process, synchronised, and its time in seconds."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    out = model(*inputs)
    sync()
    return out, time.perf_counter() - t0


def await_started(worker: WorkerHandle, timeout_s: float) -> None:
    """Wait for ``worker``'s start report (INFRA_ERROR: no candidate code has run yet)."""
    if worker.started_seen:
        return
    try:
        worker.note_started(framing.recv_json(worker.conn, timeout_s))
    except (TimeoutError, framing.PeerClosed, framing.ProtocolError) as err:
        raise Verdicted(Verdict.INFRA_ERROR, f"the {worker.role} worker did not start ({type(err).__name__}): "
                        f"{worker.exit_description()}\n{worker.stderr_tail()}") from None


@dataclasses.dataclass
class RoundMemory:
    """The rounds' memory as the set-up allocated it."""

    arenas: dict[tuple[str, str], Arena]  # (role, "in" | "out")
    rounds_per_batch: int
    block_rounds: range  # the correctness blocks' rounds, range(0) where batches are too small for them
    timed: bool  # timed blocks, until both workers confirm their gates
    in_bytes: int
    staging_layout: StagingLayout | None = None
    input_slack: int = 0  # bytes to spare in each input arena (evalfarm.judge.placement)
    staging_areas: dict[str, Arena] = dataclasses.field(default_factory=dict)
    staging: dict[str, JudgeStaging] = dataclasses.field(default_factory=dict)
    timed_rounds_per_batch: int = 0  # a timed batch's rounds (timed_rounds_per_batch); 0: rounds_per_batch
    room_to_draw_ahead: bool = False  # memory for the next correctness block's inputs beside this one's

    def staging_handle(self, role: str) -> dict[str, Any] | None:
        """What a worker needs to map its staging area; None without timed blocks."""
        area = self.staging_areas.get(role)
        return area.handle() if area is not None else None


def allocate_arenas(cfg: ScoreConfig, correctness_only: bool, ref: Reference, device: torch.device,
                    block_rounds: range, workers: dict[str, WorkerHandle], evidence: Evidence,
                    arenas: list[Arena], input_slack: int = 0, budget_bytes: int = 0) -> RoundMemory:
    """The rounds' input and output arenas (and with timed blocks each worker's staging area), as many
    rounds per batch as the memory allows; each allocated is added to ``arenas`` (closed by the caller).
    ``input_slack``: bytes more in each input arena where timed calls are placed (kept only with
    timed blocks). ``budget_bytes``: the operator's arena budget (``arena_budget``); 0: the default."""
    sample = ref.source.inputs(-1)
    in_bytes = tensors_bytes(sample)
    # Timed blocks where a round's inputs fit the staging area; decided before the arenas, which
    # they share with the correctness rounds, and confirmed once both workers have their gates.
    timed = (cfg.timing_protocol == "blocks" and not correctness_only
             and in_bytes <= STAGING_MAX_BYTES)
    layout = None
    if timed:
        layout = StagingLayout.for_inputs(
            [v.contiguous() if isinstance(v, torch.Tensor) else v for v in sample])
    del sample
    memory = ref.memory
    memory.release()  # after that draw too: the rounds are checked against what is free then
    out_bytes = sum(aligned(math.prod(s) * d.itemsize) for s, d in ref.out_struct)
    budget = arena_budget(device.type, torch.cuda.get_device_properties(device).total_memory
                          if device.type == "cuda" else 0, budget_bytes)
    per_round = 2 * (in_bytes + out_bytes)
    rounds_per_batch = max(1, min(MAX_ROUNDS_PER_BATCH, budget // max(per_round, 1)))
    if correctness_only:
        rounds_per_batch = min(rounds_per_batch, cfg.num_correctness_inputs)
    elif timed:  # a timed block needs a few calls beside its warm-up: arenas that large, where memory allows
        rounds_per_batch = max(rounds_per_batch, MIN_BLOCK_CALLS)
    try:
        rounds_per_batch = memory.before_rounds(in_bytes, out_bytes, rounds_per_batch)
        if rounds_per_batch < MIN_BLOCK_CALLS:
            timed = False  # timed rounds one call per exchange too
        if rounds_per_batch < min_block_rounds(timed):
            block_rounds = range(0)  # one call per exchange, as without blocks
        if not timed:
            input_slack = 0
        allocated = {
            (role, kind): Arena.allocate(n * rounds_per_batch + (input_slack if kind == "in" else 0), str(device),
                                         workers[role].arena_fds.pop(kind, None))
            for role in (REFERENCE, CANDIDATE) for kind, n in (("in", in_bytes), ("out", out_bytes))
        }
    except TaskTooLarge as err:
        raise Verdicted(Verdict.INFRA_ERROR, str(err), InfraCause.TASK_TOO_LARGE) from None
    except torch.cuda.OutOfMemoryError as err:
        raise Verdicted(Verdict.INFRA_ERROR, out_of_memory_reason(
            err, device, memory.footprint, "while the judge allocated the input/output arenas"),
            InfraCause.TASK_TOO_LARGE) from None
    finally:
        evidence.memory = memory.evidence()
    arenas.extend(allocated.values())
    out = RoundMemory(allocated, rounds_per_batch, block_rounds, timed, in_bytes, layout, input_slack,
                      timed_rounds_per_batch=timed_rounds_per_batch(rounds_per_batch, in_bytes),
                      # a second batch of the judge's input copies (evalfarm.judge.draw_ahead)
                      room_to_draw_ahead=bool(block_rounds) and memory.room_for(rounds_per_batch * in_bytes))
    evidence.memory = {**evidence.memory, "rounds_per_batch": rounds_per_batch,
                       **({"timed_rounds_per_batch": out.timed_rounds_per_batch} if timed else {})}
    if timed:
        assert layout is not None
        for role in (REFERENCE, CANDIDATE):
            area = Arena.allocate(layout.nbytes, "cpu", workers[role].arena_fds.pop("staging", None))
            arenas.append(area)
            out.staging_areas[role] = area
            out.staging[role] = JudgeStaging(area.buffer)
    return out


def device_facts(device: torch.device, out_struct: list[tuple[tuple[int, ...], torch.dtype]]
                 ) -> tuple[FloorFacts, int]:
    """The physical floor's facts (the DRAM peak from NVML only where the gate can apply) and the
    bytes a worker flushes the L2 with (0 off the GPU)."""
    flush_bytes = 0
    output_bytes = sum(math.prod(s) * d.itemsize for s, d in out_struct)
    l2_bytes: int | None = None
    dram: DramPeak | None = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        l2_bytes = int(getattr(props, "L2_cache_size", 0) or 0) or None
        flush_bytes = 2 * (l2_bytes or 50 << 20)
        if l2_bytes is not None and output_bytes > 2 * l2_bytes:
            dram = dram_peak(*cuda_identity(props))  # NVML; overlaps the workers' start-up
    return FloorFacts(output_bytes, l2_bytes, dram), flush_bytes


def reference_load(common: dict[str, Any], task: Task, profile: str, memory: RoundMemory,
                   reference_poison: bool) -> dict[str, Any]:
    """The reference worker's load message (``common``: what both workers get)."""
    return {
        **common, "role": REFERENCE, "task_name": task.name, "task_source": task.source,
        "size_profiles": task.size_profiles, "profile": profile, "poison": reference_poison,
        "in_arena": memory.arenas[REFERENCE, "in"].handle(), "out_arena": memory.arenas[REFERENCE, "out"].handle(),
        "staging": memory.staging_handle(REFERENCE),
    }


def candidate_load(common: dict[str, Any], ref: Reference, memory: RoundMemory,
                   candidate: Candidate) -> dict[str, Any]:
    """The candidate worker's load message: with what the reference showed of its outputs' memory."""
    return {
        **common, "role": CANDIDATE, "candidate_source": candidate.source,
        "cache_dir": candidate.staged_cache(), "arch": candidate.arch, **ref.alias_facts,
        "expected_extensions": candidate.expected_extensions, "failed_extensions": candidate.failed_extensions,
        "in_arena": memory.arenas[CANDIDATE, "in"].handle(), "out_arena": memory.arenas[CANDIDATE, "out"].handle(),
        "staging": memory.staging_handle(CANDIDATE),
    }


@dataclasses.dataclass
class Candidate:
    """The candidate's part of the request, and what the judge learns of its extensions."""

    source: str
    cache_dir: str
    arch: Any
    expected_extensions: dict[str, Any]
    # Calls the build pool failed to build: the worker's load_inline raises these (evalfarm.build.hook).
    failed_extensions: dict[str, Any]
    staged: str = ""  # StartedWorkers.staged_cache: what the candidate worker may load, read-only
    extension_files: list[str] = dataclasses.field(default_factory=list)  # the .so files it loaded (check_symbols)

    def staged_cache(self) -> str:
        """The extensions the build pool installed for this candidate, copied out of the cache into
        the directory its worker sees read-only (evalfarm.judge.worker_processes): the worker's sandbox never
        shows the cache itself, where every other candidate's builds are."""
        from evalfarm.build.cache import ExtensionCache

        dest = self.staged
        if not os.path.isdir(os.path.join(dest, "ext")):
            ExtensionCache(self.cache_dir).stage(self.expected_extensions, dest)
        return dest

    def check_symbols(self, extensions: Any, guard_policy: str, tmp: str, evidence: Evidence) -> None:
        """Static check of every extension the worker loaded, read from the cache (not the worker).

        Every finding goes into the evidence; only a blocking one (symbol interposition, which the
        worker's own clock cannot see) decides the verdict."""
        from evalfarm.build.cache import ExtensionCache
        from evalfarm.guards import ElfError, GuardPolicy, blocking, check_extension_symbols

        if not isinstance(extensions, list):
            return
        cache = ExtensionCache(self.cache_dir)
        policy = GuardPolicy.from_name(guard_policy)
        for ext in extensions:
            if not isinstance(ext, dict):
                continue
            key, name = str(ext.get("key", "")), str(ext.get("name", ""))
            if len(key) != 64 or not key.isalnum() or not name.isidentifier():
                raise Verdicted(Verdict.HACK_DETECTED, "guard worker_protocol: malformed extension report")
            so = cache.lookup(key, name)  # verified against its recorded hashes
            private = os.path.join(tmp, CANDIDATE, EXT_DIR, key, f"{name}.so")
            if so is None and os.path.isfile(private):
                so = private  # built by the worker for itself (no verified cache entry)
            if so is None:
                continue
            self.extension_files.append(str(so))
            try:
                findings = check_extension_symbols(so, policy)
            except ElfError as err:
                raise Verdicted(Verdict.INFRA_ERROR, f"cannot read built extension {name}: {err}") from None
            evidence.static_findings.extend(f.to_dict() for f in findings)
            blocks = blocking(findings)
            if blocks:
                evidence.guards.extend(f"{f.guard}: {f.reason}" for f in blocks)
                raise Verdicted(Verdict.HACK_DETECTED, f"guard {blocks[0].guard}: {blocks[0].reason}")
