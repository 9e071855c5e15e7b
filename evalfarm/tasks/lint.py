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


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, tuple | list):
        return [t for v in value for t in _tensors(v)]
    return []


def degenerate_reason(call: Callable[[list[Any]], Any], input_sets: Sequence[list[Any]]) -> str:
    """"" when the outputs differ across the input sets, else why the task is degenerate.

    ``call(inputs)`` runs the reference; the input sets must be independent random draws. The
    inputs are cloned before each call, so a reference that mutates its inputs does not see
    another call's leftovers. Tasks without tensor inputs cannot be probed this way ("")."""
    if len(input_sets) < 2 or not any(_tensors(s) for s in input_sets):
        return ""
    outputs = []
    with torch.no_grad():
        for inputs in input_sets:
            cloned = [v.clone() if isinstance(v, torch.Tensor) else v for v in inputs]
            outputs.append([t.detach().clone() for t in _tensors(call(cloned))])
    first = outputs[0]
    if any(len(o) != len(first) for o in outputs):
        return ""
    for other in outputs[1:]:
        for a, b in zip(first, other, strict=True):
            if a.shape != b.shape or a.dtype != b.dtype or not torch.equal(a, b):
                return ""
    return (f"the reference's output is bit-identical for {len(input_sets)} independent random inputs: "
            "it does not depend on them")


@dataclasses.dataclass(frozen=True)
class TaskLint:
    """One task's lint: its id, whether it loaded, and what was found."""

    task: str
    profile: str
    loaded: bool
    degenerate: str = ""
    error: str = ""
    ref_ms: float | None = None

    @property
    def ok(self) -> bool:
        return self.loaded and not self.degenerate

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "ok": self.ok}


def lint_task(task: Any, device: str = "cpu", profile: str = "auto") -> TaskLint:
    """Load ``task`` (an ``evalfarm.tasks.format.Task``), build its Model and probe it."""
    import time
    import traceback

    from evalfarm.judge.inputs import InputSource
    from evalfarm.tasks.format import instantiate_task

    dev = torch.device(device)
    resolved = task.resolve_profile(profile, dev.type)
    try:
        module = instantiate_task(task, resolved)
        source = InputSource(module, device)
        init = source.init_inputs()
        torch.manual_seed(source.weight_seed())
        model = module.Model(*init).to(dev)
        sets = [source.inputs(i) for i in range(PROBES)]
        with torch.no_grad():
            model(*[v.clone() if isinstance(v, torch.Tensor) else v for v in sets[0]])  # warm
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            t0 = time.perf_counter()
            model(*[v.clone() if isinstance(v, torch.Tensor) else v for v in sets[0]])
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            ref_ms = (time.perf_counter() - t0) * 1e3
        reason = degenerate_reason(lambda inputs: model(*inputs), sets)
    except Exception as err:  # noqa: BLE001 - a broken task is a lint result, not a crash
        tb = traceback.format_exc(limit=3)
        return TaskLint(task.name, resolved, False, error=f"{type(err).__name__}: {err}\n{tb}"[-2000:])
    return TaskLint(task.name, resolved, True, degenerate=reason, ref_ms=ref_ms)
