"""What the evidence says about a candidate's own extensions, beyond the verdict.

A candidate may catch a failed ``load_inline`` build and go on in PyTorch (evalfarm.build.hook):
it is judged like any other code, and the evidence says what happened, so a learner can pay
only for kernels that really run.

* ``worker_build_failures``: the build failures raised to the candidate in its worker (all
  caught, or there would be no verdict past loading), as the worker reported them.
* ``own_kernels`` (on a GPU, after an OK verdict): one extra, untimed call of the candidate under
  the CUDA profiler, with fresh inputs; each kernel's device time by name, and which of those
  kernels are defined in the candidate's own extensions (their names among the functions the
  built ``.so`` files define: a ``__global__`` function's host stub has the kernel's own name,
  e.g. ``void scale_kernel<float>(float const*, float*, int)``). ``own_fraction`` is the share
  of the call's GPU time in those kernels; the rest is torch's (ATen, cuBLAS, cuDNN), copies and
  memsets, or other compiled code (Triton, CuPy). On a CPU this is not measured.

The kernel times are the candidate process's own report (it runs the profiler): evidence, never
a verdict, and no part of the score. The names it is matched against come from the judge's side
(the .so files the worker loaded, read from the cache).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

# What one report may hold: the longest kernels by time, each name cut to this length (the rest
# of the time is summed under "other").
MAX_KERNELS = 64
MAX_NAME_CHARS = 2000
# Kernels listed in the evidence, longest first.
EVIDENCE_KERNELS = 20
CPU_NOTE = ("not measured on CPU: the share of GPU time in the candidate's own kernels is measured on a GPU "
            "(one profiled call after the verdict's rounds)")
HOW = ("one untimed call under torch.profiler in the candidate's process (its report), with fresh inputs, after "
       "the verdict's rounds; a kernel is its own when its name is a function its extensions' .so files define")


def profile_kernels(model: Callable[..., Any], args: list[Any], sync: Callable[[], None],
                    is_cuda: bool) -> list[list[Any]]:
    """(Worker side.) Call ``model(*args)`` once under the profiler; ``[[kernel name, device us],
    ...]`` summed by name, longest first, at most MAX_KERNELS (the rest summed as "other").
    Without CUDA the call is not profiled and nothing is returned."""
    if not is_cuda:
        return []
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    sync()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        model(*args)
        sync()
    totals: dict[str, float] = {}
    for evt in prof.events():
        if evt.device_type == DeviceType.CUDA:  # work on the device: kernels, copies, memsets
            totals[evt.name] = totals.get(evt.name, 0.0) + float(evt.time_range.end - evt.time_range.start)
    ranked = sorted(totals.items(), key=lambda kv: -kv[1])
    out = [[name[:MAX_NAME_CHARS], us] for name, us in ranked[:MAX_KERNELS]]
    if len(ranked) > MAX_KERNELS:
        out.append(["other", sum(us for _, us in ranked[MAX_KERNELS:])])
    return out


def _norm(name: str) -> str:
    """A kernel name compared: whitespace collapsed, a leading ``void`` (the demangled return type
    of a template kernel) dropped, cut like the worker cuts it."""
    name = re.sub(r"\s+", " ", name).strip()[:MAX_NAME_CHARS]
    return name[5:] if name.startswith("void ") else name


def own_kernel_names(so_paths: Iterable[str | Path]) -> tuple[set[str], str]:
    """(Judge side.) The names of every function the given built extensions define (mangled and
    demangled, compared as ``_norm`` does), and a note ("" when all went well)."""
    from evalfarm.guards.symbols import ElfError, demangle, read_symbols

    names: set[str] = set()
    notes: list[str] = []
    for path in so_paths:
        try:
            defined = [s.name.split("@")[0] for s in read_symbols(path)
                       if s.defined and s.kind in ("FUNC", "IFUNC")]
        except (OSError, ElfError) as err:
            notes.append(f"cannot read {Path(path).name}: {err}")
            continue
        pretty = demangle(defined)
        if any(n.startswith("_Z") for n in defined) and not pretty:
            notes.append("no demangler (c++filt): kernel names compared mangled")
        names.update(_norm(n) for n in defined)
        names.update(_norm(p) for p in pretty.values())
    return names, "; ".join(dict.fromkeys(notes))


def kernel_share(reply: Any, own: set[str], note: str = "") -> dict[str, Any]:
    """(Judge side.) The evidence from the worker's ``kernels`` reply and the candidate's own names."""
    if not isinstance(reply, dict) or reply.get("op") != "kernels" or not isinstance(reply.get("kernels"), list):
        detail = str(reply.get("detail", "")) if isinstance(reply, dict) else ""
        return not_measured(f"the profiled call failed: {detail}"[:500] if detail else "no kernel report")
    kernels: list[tuple[str, float]] = []
    for item in reply["kernels"][:MAX_KERNELS + 1]:
        if (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)
                and isinstance(item[1], int | float) and 0 <= item[1] < 1e12):
            kernels.append((item[0][:MAX_NAME_CHARS], float(item[1])))
    total = sum(us for _, us in kernels)
    if total <= 0:
        return not_measured("the profiler reported no GPU work (no CUDA activity recorded for the call)")
    flagged = [(name, us, name != "other" and _norm(name) in own) for name, us in kernels]
    own_us = sum(us for _, us, mine in flagged if mine)
    out: dict[str, Any] = {
        "measured": True, "total_us": round(total, 3), "own_us": round(own_us, 3),
        "own_fraction": round(own_us / total, 4),
        "kernels": [{"name": name[:300], "us": round(us, 3), "own": mine} for name, us, mine in flagged[:EVIDENCE_KERNELS]],
        "how": HOW,
    }
    if note:
        out["note"] = note
    return out


def no_own_extension() -> dict[str, Any]:
    """A candidate that loaded no extension of its own (its builds failed, caught): none of its
    GPU time can be in its own compiled kernels; nothing to profile."""
    return {"measured": False, "own_fraction": 0.0,
            "note": "no extension of its own was loaded (its builds failed and it went on without them)"}


def not_measured(note: str) -> dict[str, Any]:
    return {"measured": False, "note": note}


def worker_build_failures(value: Any) -> list[dict[str, Any]]:
    """The worker's report of the build failures it raised to the candidate (an untrusted process's
    word: evidence only), checked and cut to size."""
    out: list[dict[str, Any]] = []
    if not isinstance(value, list):
        return out
    for item in value[:16]:
        if not isinstance(item, dict):
            continue
        entry: dict[str, Any] = {"name": str(item.get("name", ""))[:200], "key": str(item.get("key", ""))[:64],
                                 "recorded": bool(item.get("recorded"))}
        if not entry["recorded"]:  # built in the candidate's own process (a call discover did not see)
            entry["log"] = str(item.get("log", ""))[-4000:]
        out.append(entry)
    return out
