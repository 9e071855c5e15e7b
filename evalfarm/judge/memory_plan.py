"""Planning a task's device memory before an evaluation starts, against what the device has free.

A full-size KernelBench task can need tens of GB: the judge holds up to two input sets and one
reference output while it probes the task (``setup_bytes``); during the rounds, input/output
arenas for both workers and its own copy of each round's inputs, and each worker holds the
model's weights, its intermediates and its output, the candidate also its previous round's
output (``rounds_bytes``). Where more rounds per batch would not fit, the batch is made smaller
(``rounds_that_fit``), down to one round. When that cannot fit, the evaluation ends before anything large is allocated with a
clear reason ("needs ~N GB, the device has M GB free") instead of an out-of-memory traceback.

Two estimates, both from the task itself, never from the candidate:

* before the judge builds the task on the device, a *meta* estimate: the task's ``get_inputs``,
  ``Model`` and one forward call run on PyTorch's ``meta`` device (shapes and dtypes, no memory),
  giving input, weight and output bytes; intermediates are not known yet and are estimated as one
  more output;
* after the judge's first reference calls, the *measured* peak of one call (intermediates and
  outputs) replaces that guess for the rest of the plan.

The numbers are an estimate (``~``): allocator rounding, cuDNN/cuBLAS workspaces and a candidate
that needs more than the reference are not known in advance; ``CONTEXT_BYTES`` per process and
``SLACK`` cover the usual part of them.
"""

from __future__ import annotations

import dataclasses
import logging
import types
from collections.abc import Sequence
from typing import Any

import torch

from evalfarm.tasks.lint import tensors_in

log = logging.getLogger(__name__)

GB = 1e9
# A CUDA context plus torch's own workspaces, per process (the judge and two workers).
CONTEXT_BYTES = 600 << 20
# Each worker's L2-flush buffer (2x the L2: 100 MB on an H100, 252 MB on a B200).
FLUSH_BYTES = 256 << 20
SLACK = 1.10  # the caching allocator's rounding and fragmentation (not applied to the arenas)
PROCESSES = 3
PREFIX = "task_too_large"


class TaskTooLarge(Exception):
    """The task cannot be evaluated in the memory the device has free; the message says by how much."""


@dataclasses.dataclass
class Footprint:
    """A task's memory, in bytes: one round's inputs, the weights, one reference output, and the
    peak of one reference call beyond its inputs and weights (intermediates plus outputs)."""

    input_bytes: int
    weight_bytes: int
    output_bytes: int
    call_peak_bytes: int
    measured: bool = False  # call_peak_bytes measured on the device (else estimated)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _tensor_bytes(values: Any) -> int:
    if isinstance(values, torch.Tensor):
        return values.numel() * values.element_size()
    if isinstance(values, tuple | list):
        return sum(_tensor_bytes(v) for v in values)
    return 0


def module_bytes(model: torch.nn.Module) -> int:
    """Parameters and buffers of ``model`` (shared tensors once)."""
    seen: set[int] = set()
    total = 0
    for t in [*model.parameters(), *model.buffers()]:
        key = id(t)
        if key not in seen:
            seen.add(key)
            total += t.numel() * t.element_size()
    return total


def warm_meta() -> None:
    """Pay, ahead of any evaluation, what the first meta-device forward of a process costs
    (PyTorch loads its meta kernels lazily: ~1 s on a development CPU, every judge's first
    meta_footprint); a standby judge calls it while it waits for its request."""
    with torch.device("meta"), torch.no_grad():
        x = torch.empty(4, 4)
        torch.nn.functional.gelu(torch.tanh(x) * 0.5 + x).sum()


def meta_footprint(task_module: types.ModuleType, init_inputs: Sequence[Any]) -> Footprint | None:
    """The task's footprint from shapes alone (PyTorch's meta device), or None where the task
    cannot run there (data-dependent shapes, ops without meta kernels, explicit devices)."""
    try:
        with torch.device("meta"), torch.no_grad():
            inputs = list(task_module.get_inputs())
            model = task_module.Model(*init_inputs)
            out = model(*inputs)
        if not all(t.device.type == "meta" for t in tensors_in(inputs) + tensors_in(out)):
            return None
        in_b, out_b = _tensor_bytes(inputs), _tensor_bytes(out)
        return Footprint(in_b, module_bytes(model), out_b, call_peak_bytes=2 * out_b)
    except Exception as err:  # noqa: BLE001 - any failure only means "no estimate"
        log.info("no meta-device footprint: %s: %s", type(err).__name__, err)
        return None


@dataclasses.dataclass
class MemoryPlan:
    """What the evaluation needs at its two peaks, against the device's free memory."""

    footprint: Footprint
    setup_bytes: int  # the judge's probe of the task
    run_bytes: int  # arenas, the judge's input copies and both workers during the rounds
    free_bytes: int
    total_bytes: int

    @property
    def need_bytes(self) -> int:
        return max(self.setup_bytes, self.run_bytes)

    @property
    def fits(self) -> bool:
        return self.need_bytes <= self.free_bytes

    def reason(self, when: str = "") -> str:
        fp = self.footprint
        return (f"{PREFIX}: the task needs ~{self.need_bytes / GB:.1f} GB of device memory, the device has "
                f"{self.free_bytes / GB:.1f} GB free (of {self.total_bytes / GB:.1f} GB){when}: inputs "
                f"{fp.input_bytes / GB:.2f} GB, outputs {fp.output_bytes / GB:.2f} GB, weights "
                f"{fp.weight_bytes / GB:.2f} GB, one reference call's peak {fp.call_peak_bytes / GB:.2f} GB"
                f" ({'measured' if fp.measured else 'estimated'}); the judge holds inputs and outputs for "
                "two workers that each hold the model (docs/tasks.md, full-size tasks)")

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "need_bytes": self.need_bytes, "fits": self.fits}


def setup_bytes(fp: Footprint) -> int:
    """The judge's probe of the task at its peak (``evalfarm.judge.setup.set_up_reference``): the model's weights, then
    either the first call's inputs, its output (kept for the aliasing check) and the same inputs
    drawn again (the in-place check), or those inputs, the kept output and the second call's
    peak; the degenerate-task probe afterwards holds one input set, one kept output and a call."""
    return fp.weight_bytes + max(2 * fp.input_bytes + fp.output_bytes,
                                 fp.input_bytes + fp.output_bytes + fp.call_peak_bytes)


def rounds_bytes(fp: Footprint, rounds_per_batch: int = 1) -> int:
    """What the rounds hold, all at once, without the per-process contexts.

    Exact-size arenas (their own segments): each worker's inputs and outputs, per round of a
    batch. Through the caching allocators (times ``SLACK``): the judge's own copy of a batch's
    inputs (which it draws on the device), the reference worker's weights and one call's peak, the
    candidate worker's weights, one call's peak and the previous round's output, which it keeps
    alive for the persistent-output check; each worker's L2-flush buffer."""
    arenas = rounds_per_batch * 2 * (fp.input_bytes + fp.output_bytes)
    judge = rounds_per_batch * fp.input_bytes
    workers = 2 * (fp.weight_bytes + fp.call_peak_bytes) + fp.output_bytes
    return arenas + int(SLACK * (judge + workers)) + 2 * FLUSH_BYTES


def plan(fp: Footprint, free_bytes: int, total_bytes: int, rounds_per_batch: int = 1) -> MemoryPlan:
    """The two peaks of an evaluation of a task with footprint ``fp`` (``setup_bytes``,
    ``rounds_bytes``), each with a CUDA context per process."""
    contexts = PROCESSES * CONTEXT_BYTES
    return MemoryPlan(fp, int(SLACK * setup_bytes(fp)) + contexts, rounds_bytes(fp, rounds_per_batch) + contexts,
                      int(free_bytes), int(total_bytes))


def rounds_that_fit(fp: Footprint, free_bytes: int, most: int) -> int:
    """The most rounds per batch (at most ``most``, at least 1) whose memory fits ``free_bytes``:
    a large task's rounds go one at a time rather than not at all."""
    k = max(1, most)
    while k > 1 and rounds_bytes(fp, k) + PROCESSES * CONTEXT_BYTES > free_bytes:
        k //= 2
    return k


def device_memory(device: torch.device) -> tuple[int, int]:
    """(free, total) bytes of a CUDA device as the driver reports them (other processes included)."""
    free, total = torch.cuda.mem_get_info(device)
    return int(free), int(total)


def measure_call_peak(device: torch.device, call: Any) -> tuple[Any, int]:
    """Run ``call()`` and return its result and the peak memory it allocated beyond what was
    allocated before it (its intermediates and outputs)."""
    torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    out = call()
    torch.cuda.synchronize(device)
    return out, max(0, torch.cuda.max_memory_allocated(device) - base)


def out_of_memory_reason(err: BaseException, device: torch.device, fp: Footprint | None, when: str) -> str:
    """A reason for an out-of-memory error while the judge runs the reference (no traceback)."""
    free, total = device_memory(device)
    first = str(err).strip().splitlines()[0][:300] if str(err).strip() else type(err).__name__
    est = f"; estimated need ~{plan(fp, free, total).need_bytes / GB:.1f} GB" if fp is not None else ""
    return (f"{PREFIX}: the device ran out of memory {when} ({first}); the device has {free / GB:.1f} GB free "
            f"of {total / GB:.1f} GB{est}")


class MemoryGate:
    """The judge's hooks: check before the task is built on the device, measure the reference's
    call, free the probe's memory, check again before the rounds' memory is allocated. A no-op
    off CUDA (host memory is bounded by the workers' resource limits instead)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.enabled = device.type == "cuda"
        self.footprint: Footprint | None = None
        self.last: MemoryPlan | None = None
        self.planned_from = ""  # where the footprint before set-up came from (the evidence says)

    def before_setup(self, task_module: types.ModuleType, init_inputs: Sequence[Any],
                     known: dict[str, int] | None = None) -> None:
        """The plan before the task is built: from ``known`` (the footprint an earlier judge of this
        task measured, evalfarm.judge.task_facts) where given, else estimated from shapes."""
        if not self.enabled:
            return
        if known is not None:
            self.footprint = Footprint(**known, measured=True)
            self.planned_from = "measured by an earlier evaluation of this task"
        else:
            self.footprint = meta_footprint(task_module, init_inputs)
            self.planned_from = "estimated from shapes"
        if self.footprint is None:
            return
        self.last = plan(self.footprint, *device_memory(self.device))
        if not self.last.fits:
            raise TaskTooLarge(self.last.reason(" (estimated from shapes before running the task)"))

    def measured_call(self, call: Any) -> Any:
        """``call()``, with its peak memory recorded into the footprint."""
        if not self.enabled:
            return call()
        out, peak = measure_call_peak(self.device, call)
        if self.footprint is not None:
            self.footprint.call_peak_bytes = peak
            self.footprint.measured = True
        return out

    def release(self) -> None:
        """Give the probe's cached blocks back to the driver, for the workers."""
        if self.enabled:
            torch.cuda.empty_cache()

    def before_rounds(self, input_bytes: int, output_bytes: int, rounds_per_batch: int) -> int:
        """Check the rounds' memory against what is free now; returns the rounds per batch to
        use (``rounds_per_batch``, or fewer where more would not fit)."""
        if not self.enabled:
            return rounds_per_batch
        fp = self.footprint or Footprint(input_bytes, 0, output_bytes, 2 * output_bytes)
        fp.input_bytes, fp.output_bytes = input_bytes, output_bytes
        self.footprint = fp
        free, total = device_memory(self.device)
        # The setup peak is over: only what the rounds need must fit now.
        rounds_per_batch = rounds_that_fit(fp, free, rounds_per_batch)
        p = plan(fp, free, total, rounds_per_batch)
        p.setup_bytes = 0
        self.last = p
        if not p.fits:
            raise TaskTooLarge(p.reason(" (measured after probing the task)"))
        return rounds_per_batch

    def room_for(self, extra_bytes: int) -> bool:
        """Whether ``extra_bytes`` more of the judge's own (caching-allocator) memory fit beside the
        rounds' plan, in what was free when it was checked (``before_rounds``). Off CUDA: True."""
        if not self.enabled:
            return True
        if self.last is None:
            return False
        return self.last.run_bytes + int(SLACK * extra_bytes) <= self.last.free_bytes

    def evidence(self) -> dict[str, Any]:
        if self.last is None:
            return {}
        return {**self.last.to_dict(), **({"planned_from": self.planned_from} if self.planned_from else {})}
