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


def degenerate_reason(call: Callable[[list[Any]], Any], input_sets: Sequence[list[Any]]) -> str:
    """"" when the outputs differ across the input sets, else why the task is degenerate.

    ``call(inputs)`` runs the reference; the input sets must be independent random draws. The
    inputs are cloned before each call, so a reference that mutates its inputs does not see
    another call's leftovers. Tasks without tensor inputs cannot be probed this way ("")."""
    if len(input_sets) < 2 or not any(tensors_in(s) for s in input_sets):
        return ""
    # Only the first call's outputs are kept; each later call is compared as it comes (a full-size
    # task's outputs can be GBs each).
    first: list[torch.Tensor] | None = None
    with torch.no_grad():
        for inputs in input_sets:
            cloned = [v.clone() if isinstance(v, torch.Tensor) else v for v in inputs]
            outs = tensors_in(call(cloned))
            del cloned
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
    what a GPU evaluation needs, ``free_bytes`` what the device had free (GPU only), ``fits``
    whether one evaluation fits there (None off a GPU)."""

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


def _memory_fields(fp: Any, dev: torch.device) -> dict[str, Any]:
    from evalfarm.judge.memory_plan import device_memory, plan

    free, total = device_memory(dev) if dev.type == "cuda" else (0, 0)
    p = plan(fp, free, total)
    return {"input_bytes": fp.input_bytes, "output_bytes": fp.output_bytes, "weight_bytes": fp.weight_bytes,
            "call_peak_bytes": fp.call_peak_bytes, "need_bytes": p.need_bytes,
            "free_bytes": free if dev.type == "cuda" else None, "fits": p.fits if dev.type == "cuda" else None}


def lint_task(task: Any, device: str = "cpu", profile: str = "auto") -> TaskLint:
    """Load ``task`` (an ``evalfarm.tasks.format.Task``), plan its memory, build its Model and probe it.

    On a GPU a task whose shape-based estimate does not fit the free memory is not run
    (``fits`` False, ``error`` says by how much)."""
    import time
    import traceback

    from evalfarm.judge.inputs import InputSource
    from evalfarm.judge.memory_plan import (
        Footprint,
        measure_call_peak,
        meta_footprint,
        module_bytes,
    )
    from evalfarm.tasks.format import instantiate_task

    dev = torch.device(device)
    resolved = task.resolve_profile(profile, dev.type)
    memory: dict[str, Any] = {}
    try:
        module = instantiate_task(task, resolved)
        source = InputSource(module, device)
        init = source.init_inputs()
        fp = meta_footprint(module, init)
        if fp is not None:
            memory = _memory_fields(fp, dev)
            if memory["fits"] is False:
                from evalfarm.judge.memory_plan import plan

                reason = plan(fp, memory["free_bytes"], memory["free_bytes"]).reason(" (estimated from shapes)")
                return TaskLint(task.name, resolved, True, error=reason, **memory)
        torch.manual_seed(source.weight_seed())
        model = module.Model(*init).to(dev)
        sets = [source.inputs(i) for i in range(PROBES)]
        with torch.no_grad():
            model(*[v.clone() if isinstance(v, torch.Tensor) else v for v in sets[0]])  # warm
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            t0 = time.perf_counter()
            args = [v.clone() if isinstance(v, torch.Tensor) else v for v in sets[0]]
            if dev.type == "cuda":
                out, peak = measure_call_peak(dev, lambda a=args: model(*a))
            else:
                out, peak = model(*args), None
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            ref_ms = (time.perf_counter() - t0) * 1e3
            if fp is None or peak is not None:
                out_b = sum(t.numel() * t.element_size() for t in tensors_in(out))
                in_b = sum(t.numel() * t.element_size() for t in tensors_in(sets[0]))
                fp = Footprint(in_b, module_bytes(model), out_b, peak if peak is not None else 2 * out_b,
                               measured=peak is not None)
                memory = _memory_fields(fp, dev)
            del out, args
        reason = degenerate_reason(lambda inputs: model(*inputs), sets)
    except Exception as err:  # noqa: BLE001 - a broken task is a lint result, not a crash
        tb = traceback.format_exc(limit=3)
        return TaskLint(task.name, resolved, False, error=f"{type(err).__name__}: {err}\n{tb}"[-2000:], **memory)
    return TaskLint(task.name, resolved, True, degenerate=reason, ref_ms=ref_ms, **memory)
