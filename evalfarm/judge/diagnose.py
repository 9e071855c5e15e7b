"""Diagnostics a kernel engineer asks for with ``evalfarm score``: what the judge writes.

* ``--save-failing-input DIR``: the first failing correctness round's inputs, the reference's
  outputs and the candidate's outputs, as ``torch.save`` files plus ``failing_input.json``
  describing them. The judge writes them (it owns the inputs and both workers' outputs); the
  candidate's process never sees the reference's outputs or the input seed.
* ``--profile DIR``: a torch profiler trace of one candidate call, made by the candidate worker
  in one extra, untimed call with fresh inputs after the verdict's rounds are done (the worker's
  ``profile`` op, ``evalfarm.judge.profiling``); the judge copies the trace from the worker's
  private directory into DIR. Where ``ncu`` is on PATH and the device is a GPU, an Nsight
  Compute report of one call is added (``evalfarm.judge.ncu_target`` under ``ncu``); otherwise
  ``profile.json`` says why not.

Every file written is listed in ``evidence.diagnostics``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# The files the candidate worker's profile op may leave (anything else in its directory is ignored).
TRACE_FILES = ("trace.json", "key_averages.txt")
MAX_TRACE_BYTES = 512 << 20
NCU_TIMEOUT_S = 300.0


@dataclasses.dataclass(frozen=True)
class Diagnostics:
    """Where to write diagnostics for one evaluation (None: not asked for)."""

    profile_dir: str | None = None
    failing_input_dir: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: Any) -> Diagnostics:
        if not isinstance(values, dict):
            return cls()
        return cls(**{f.name: (str(values[f.name]) if values.get(f.name) else None)
                      for f in dataclasses.fields(cls)})

    @property
    def wanted(self) -> bool:
        return bool(self.profile_dir or self.failing_input_dir)


def describe_value(value: Any) -> dict[str, Any]:
    """A small description of one input or output (shape, dtype, summary statistics)."""
    import torch

    if not isinstance(value, torch.Tensor):
        return {"kind": type(value).__name__, "value": repr(value)[:200]}
    d: dict[str, Any] = {"kind": "tensor", "shape": list(value.shape), "dtype": str(value.dtype).replace("torch.", ""),
                         "device": str(value.device)}
    if value.numel() and not value.is_complex() and value.dtype is not torch.bool:
        v = value.detach().double()
        finite = torch.isfinite(v)
        d["nonfinite"] = int((~finite).sum())
        if bool(finite.any()):
            f = v[finite]
            d.update(min=float(f.min()), max=float(f.max()), mean=float(f.mean()))
    return d


def _cpu(values: list[Any]) -> list[Any]:
    import torch

    return [v.detach().to("cpu", copy=True) if isinstance(v, torch.Tensor) else v for v in values]


def save_failing_round(out_dir: str | os.PathLike[str], *, task: str, round_index: int, reason: str,
                       inputs: list[Any], reference: list[Any], candidate: list[Any],
                       size_profile: str) -> dict[str, Any]:
    """Write one failing round's tensors (``torch.load``-able, on the CPU) and ``failing_input.json``;
    return the JSON's content (with the files' paths)."""
    import torch

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {"inputs": out / "inputs.pt", "reference_output": out / "reference_output.pt",
             "candidate_output": out / "candidate_output.pt"}
    torch.save(_cpu(inputs), files["inputs"])
    torch.save(_cpu(reference), files["reference_output"])
    torch.save(_cpu(candidate), files["candidate_output"])
    meta = {
        "task": task, "size_profile": size_profile, "correctness_round": round_index + 1, "reason": reason,
        "files": {k: str(v) for k, v in files.items()},
        "inputs": [describe_value(v) for v in inputs],
        "reference_output": [describe_value(v) for v in reference],
        "candidate_output": [describe_value(v) for v in candidate],
        "how_to_load": "torch.load(path) gives a list (one entry per forward argument or output)",
    }
    (out / "failing_input.json").write_text(json.dumps(meta, indent=2) + "\n")
    return {**meta, "dir": str(out), "json": str(out / "failing_input.json")}


def collect_trace(worker_dir: str, out_dir: str | os.PathLike[str]) -> list[str]:
    """Copy the profile op's files from the candidate worker's directory into ``out_dir``.

    The directory belongs to an untrusted process: only the expected names are taken, only regular
    files (never links), and none larger than MAX_TRACE_BYTES."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    copied = []
    for name in TRACE_FILES:
        src = os.path.join(worker_dir, name)
        try:
            fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_TRACE_BYTES:
                continue
            dest = out / ("candidate_" + name)
            with dest.open("wb") as g:
                shutil.copyfileobj(f, g)
            copied.append(str(dest))
    return copied


def ncu_report(out_dir: str | os.PathLike[str], *, device: str, spec: dict[str, Any], tmp: str,
               visible: str = "0") -> dict[str, Any]:
    """An Nsight Compute report of one candidate call, or a note saying why there is none.

    Runs ``evalfarm.judge.ncu_target`` (the candidate's ModelNew on fresh inputs, one warm-up call,
    then one call between cudaProfilerStart and Stop) under ``ncu --profile-from-start off`` in a
    sandboxed process of its own."""
    from evalfarm import sandbox

    if not device.startswith("cuda"):
        return {"ncu": None, "ncu_note": f"no Nsight Compute report: the device is {device}, not a CUDA GPU"}
    ncu = shutil.which("ncu")
    if ncu is None:
        return {"ncu": None, "ncu_note": "no Nsight Compute report: ncu is not on PATH"}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    work = os.path.join(tmp, "ncu")
    os.makedirs(work, exist_ok=True)
    spec_path = os.path.join(work, "spec.json")
    Path(spec_path).write_text(json.dumps(spec))
    report = out / "candidate.ncu-rep"
    cmd = [ncu, "--profile-from-start", "off", "--set", "full", "--target-processes", "all",
           "--export", str(report.with_suffix("")), "--force-overwrite",
           *sandbox.python_cmd("evalfarm.judge.ncu_target"), spec_path]
    env = sandbox.clean_env(work, {"CUDA_VISIBLE_DEVICES": visible})
    log_path = out / "ncu.log"
    try:
        with log_path.open("wb") as logf:
            proc = subprocess.run(cmd, cwd=work, env=env, stdout=logf, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, timeout=NCU_TIMEOUT_S, start_new_session=True)
    except subprocess.TimeoutExpired:
        return {"ncu": None, "ncu_log": str(log_path), "ncu_note": f"ncu did not finish in {NCU_TIMEOUT_S:g} s"}
    except OSError as err:
        return {"ncu": None, "ncu_note": f"ncu could not start: {err}"}
    if proc.returncode != 0 or not report.exists():
        return {"ncu": None, "ncu_log": str(log_path),
                "ncu_note": f"ncu exited with code {proc.returncode} (see {log_path}; profiling counters "
                            "may need root or NVreg_RestrictProfilingToAdminUsers=0)"}
    return {"ncu": str(report), "ncu_log": str(log_path), "ncu_note": ""}


def write_inputs(arena: Any, inputs: list[Any]) -> list[list[Any]]:
    """Write one call's inputs into a fresh arena (reset first); return the worker's argument spec."""
    import torch

    arena.reset()
    slots = [arena.alloc(tuple(v.shape), v.dtype) if isinstance(v, torch.Tensor) else None for v in inputs]
    for v, slot in zip(inputs, slots, strict=True):
        if slot is not None:
            arena.view(slot).copy_(v)
    return [["T", s.to_wire()] if s is not None else ["S", v] for s, v in zip(slots, inputs, strict=True)]


def finish_profile(out_dir: str, worker_dir: str, reply: dict[str, Any], *, device: str, tmp: str, visible: str,
                   size_profile: str, spec: dict[str, Any]) -> dict[str, Any]:
    """After the worker's profile op answered: copy its trace, add the ncu report (or why not),
    write ``profile.json``; return what goes into ``evidence.diagnostics["profile"]``."""
    summary: dict[str, Any] = {"size_profile": size_profile, "files": [], "note": ""}
    if reply.get("op") == "profiled":
        summary["files"] = collect_trace(worker_dir, out_dir)
    else:
        summary["note"] = f"torch profiler trace failed: {str(reply.get('detail', reply))[:2000]}"
    summary.update(ncu_report(out_dir, device=device, tmp=tmp, visible=visible, spec=spec))
    if summary.get("ncu"):
        summary["files"].append(summary["ncu"])
    summary["summary"] = write_profile_summary(out_dir, summary)
    return summary


def write_profile_summary(out_dir: str | os.PathLike[str], summary: dict[str, Any]) -> str:
    path = Path(out_dir) / "profile.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2) + "\n")
    return str(path)
