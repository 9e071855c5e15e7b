"""Timer and synchronisation patching in Python (``time.*``, torch events, synchronize ...).
Runtime: the judge times with functions bound before the candidate loads, checks event time
against wall time, and ends each timed call with a device-wide sync. Role: testifies."""

from __future__ import annotations

import ast
from typing import Any

from evalfarm.guards.rules.base import matches

RULE_IDS = ("timer_patch",)

_PREFIXES = (
    "time", "timeit", "torch.cuda.synchronize", "torch.cuda.Event", "torch.cuda.Stream",
    "torch.cuda.current_stream", "torch.cuda.default_stream", "torch.cuda.event",
    "torch.cuda.streams", "torch.synchronize", "torch.cpu.synchronize", "torch.Event",
    "torch.cuda.Event.elapsed_time", "torch.profiler", "torch.cuda.nvtx", "torch.cuda.profiler",
    "torch.utils.benchmark", "torch.cuda.cudart", "torch._C._cuda_synchronize",
    "torch.accelerator", "datetime",
)


def on_patch(eng: Any, node: ast.AST, target: str, verb: str) -> bool:
    last = target.split(".")[-1]
    if matches(target, _PREFIXES) or any(
            k in last for k in ("synchronize", "elapsed_time", "perf_counter", "record")):
        eng.add("timer_patch", node, f"{verb} {target}: patches the timer/synchronisation")
        return True
    return False
