"""Checks of a task itself: is a speedup on it meaningful at all?

A task whose reference output does not depend on its inputs (an output that is identically
zero, a result that ignores ``x``) pays any shortcut: a candidate that returns a constant, or
computes a shrunken layer, is "correct" and "fast". The judge probes each task once, when it
loads it, with a few independent random input sets; when every output is bit-identical across
them the task is *degenerate*: the verdict still says whether the candidate is correct, but no
speedup is paid (the score is 1.00 with ``evidence.task_flags["degenerate"]``). ``evalfarm
tasks --lint`` runs the same probe over a suite.

Independence of a *parameter* is deliberately not a flag: a bias cancelled by a following
normalisation, or a shift before a softmax, is a legitimate algebraic shortcut that real
kernels exploit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch

PROBES = 3


def tensors_in(value: Any) -> list[torch.Tensor]:
    """Every tensor in a value, through nested tuples and lists, in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, tuple | list):
        return [t for v in value for t in tensors_in(v)]
    return []


InputSet = list[Any] | Callable[[], list[Any]]


def degenerate_reason(call: Callable[[list[Any]], Any], input_sets: Sequence[InputSet]) -> str:
    """"" when the outputs differ across the input sets, else why the task is degenerate.

    ``call(inputs)`` runs the reference; the input sets must be independent random draws, each a
    list of inputs or a function that draws one (then only one set exists at a time: a full-size
    task's inputs can be GBs each). A given list is cloned before its call, so a reference that
    mutates its inputs does not see another call's leftovers. Tasks without tensor inputs cannot
    be probed this way ("")."""
    if len(input_sets) < 2:
        return ""
    # Only the first call's outputs are kept; each later call is compared as it comes.
    first: list[torch.Tensor] | None = None
    with torch.no_grad():
        for given in input_sets:
            inputs = given() if callable(given) else [v.clone() if isinstance(v, torch.Tensor) else v for v in given]
            if not tensors_in(inputs):
                return ""
            outs = tensors_in(call(inputs))
            del inputs
            if first is None:
                first = [t.detach().clone() for t in outs]
                continue
            if len(outs) != len(first):
                return ""
            for a, b in zip(first, outs, strict=True):
                if a.shape != b.shape or a.dtype != b.dtype or not torch.equal(a, b):
                    return ""
    return (f"the reference's output is bit-identical for {len(input_sets)} independent random inputs: "
            "it does not depend on them")


@dataclasses.dataclass(frozen=True)
class TaskLint:
    """One task's lint: its id, whether it loaded, what was found, and its memory need.

    The byte counts come from ``evalfarm.judge.memory_plan`` (one round's inputs, one output, the
    weights, one reference call's peak: measured on a GPU, estimated on CPU); ``need_bytes`` is
    what a GPU evaluation needs, ``free_bytes`` what the device had free before the lint allocated
    anything (GPU only, or the ``memory`` given to ``lint_task``), ``fits`` whether one evaluation
    fits there (None off a GPU without ``memory``)."""

    task: str
    profile: str
    loaded: bool
    degenerate: str = ""
    error: str = ""
    ref_ms: float | None = None
    input_bytes: int | None = None
    output_bytes: int | None = None
    weight_bytes: int | None = None
    call_peak_bytes: int | None = None
    need_bytes: int | None = None
    free_bytes: int | None = None
    fits: bool | None = None

    @property
    def ok(self) -> bool:
        return self.loaded and not self.degenerate and self.fits is not False

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "ok": self.ok}


def _memory_fields(fp: Any, memory: tuple[int, int] | None) -> dict[str, Any]:
    from evalfarm.judge.memory_plan import plan

    free, total = memory if memory is not None else (0, 0)
    p = plan(fp, free, total)
    return {"input_bytes": fp.input_bytes, "output_bytes": fp.output_bytes, "weight_bytes": fp.weight_bytes,
            "call_peak_bytes": fp.call_peak_bytes, "need_bytes": p.need_bytes,
            "free_bytes": free if memory is not None else None, "fits": p.fits if memory is not None else None}


def free_before_lint(device: torch.device) -> tuple[int, int] | None:
    """(free, total) bytes of a CUDA device before the lint allocates anything: what an
    evaluation's plan is checked against (memory cached by earlier lints in this process is
    given back first). None off CUDA."""
    if device.type != "cuda":
        return None
    import gc

    from evalfarm.judge.memory_plan import device_memory

    gc.collect()
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    return device_memory(device)


def lint_task(task: Any, device: str = "cpu", profile: str = "auto",
              memory: tuple[int, int] | None = None) -> TaskLint:
    """Load ``task`` (an ``evalfarm.tasks.format.Task``), plan its memory, build its Model and probe it.

    The plan is checked against ``memory`` = (free, total) bytes when given, else on a GPU against
    what the device had free before this lint allocated anything (``free_before_lint``); off a GPU
    without ``memory``, ``fits`` is None. On a GPU a task whose shape-based estimate does not fit
    is not run (``fits`` False, ``error`` says by how much); nor is it anywhere else with a
    ``memory`` it does not fit."""
    import time
    import traceback

    from evalfarm.judge.inputs import InputSource
    from evalfarm.judge.memory_plan import (
        Footprint,
        measure_call_peak,
        meta_footprint,
        module_bytes,
        plan,
    )
    from evalfarm.tasks.format import instantiate_task

    dev = torch.device(device)
    resolved = task.resolve_profile(profile, dev.type)
    if memory is None:
        memory = free_before_lint(dev)
    fields: dict[str, Any] = {}
    try:
        module = instantiate_task(task, resolved)
        source = InputSource(module, device)
        init = source.init_inputs()
        fp = meta_footprint(module, init)
        if fp is not None:
            fields = _memory_fields(fp, memory)
            if fields["fits"] is False:
                reason = plan(fp, *memory).reason(" (estimated from shapes)")  # type: ignore[misc]
                return TaskLint(task.name, resolved, True, error=reason, **fields)
        torch.manual_seed(source.weight_seed())
        model = module.Model(*init).to(dev)
        with torch.no_grad():
            model(*source.inputs(0))  # warm
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            args = source.inputs(0)
            in_b = sum(t.numel() * t.element_size() for t in tensors_in(args))
            t0 = time.perf_counter()
            if dev.type == "cuda":
                out, peak = measure_call_peak(dev, lambda a=args: model(*a))
            else:
                out, peak = model(*args), None
            ref_ms = (time.perf_counter() - t0) * 1e3
            if fp is None or peak is not None:
                out_b = sum(t.numel() * t.element_size() for t in tensors_in(out))
                fp = Footprint(in_b, module_bytes(model), out_b, peak if peak is not None else 2 * out_b,
                               measured=peak is not None)
                fields = _memory_fields(fp, memory)
            del out, args
        reason = degenerate_reason(lambda inputs: model(*inputs),
                                   [lambda i=i: source.inputs(i) for i in range(PROBES)])
    except Exception as err:  # noqa: BLE001 - a broken task is a lint result, not a crash
        tb = traceback.format_exc(limit=3)
        return TaskLint(task.name, resolved, False, error=f"{type(err).__name__}: {err}\n{tb}"[-2000:], **fields)
    return TaskLint(task.name, resolved, True, degenerate=reason, ref_ms=ref_ms, **fields)
