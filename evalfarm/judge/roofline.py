"""How close a call is to the hardware: achieved FLOP/s and bytes/s against the device's peaks.

For every OK result the judge reports ``evidence.roofline`` (``Judge._evaluate``):

* ``flops``: one reference call's floating-point operations as PyTorch's ``FlopCounterMode``
  counts them (matrix products, convolutions, attention; elementwise work and reductions count
  nothing there), counted once in the judge's set-up on one input set. The candidate computes the
  same function, so the same count is used for both (a candidate that does less arithmetic, an
  algebraic shortcut, shows a higher achieved rate than it runs: the count is the task's).
* ``bytes``: what one call must at least move: its inputs read, its outputs written and the
  reference model's parameters and buffers read, each once (``bytes_parts``); a lower bound of
  its DRAM traffic, whatever caches do.
* ``ref`` / ``cand``: from the timing medians (``TimingEvidence.ref_time_us_median``,
  ``cand_time_us_median``: whole synchronised calls), ``tflops`` and ``tbps`` achieved and, where
  the peaks are known, ``flop_fraction`` and ``byte_fraction`` of them.
* ``peaks``: ``dram_bytes_s`` from NVML (evalfarm.devices.dram_peak) where it can be read, else
  this module's table; ``flops_per_s`` from the table for the task's dtype: the plain float32
  rate for float32 (the judge's reference runs without TF32), the dense tensor-core rate for
  float16/bfloat16 and float64. Unknown GPUs and CPUs have null peaks and a note; the achieved
  rates are reported anyway.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from evalfarm.judge.dispatch import JudgeDispatchMode

# Dense (no structured sparsity) peaks at boost clocks, FLOP/s, and DRAM bytes/s.
# Sources: NVIDIA H100 Tensor Core GPU datasheet (SXM5 and PCIe columns; its tensor-core figures
# are quoted "with sparsity", halved here), NVIDIA H200 Tensor Core GPU datasheet (H200 SXM: the
# H100 SXM5's compute, 4.8 TB/s), NVIDIA A100 Tensor Core GPU datasheet (SXM4 and PCIe: the same
# compute; 1,555 / 1,935 / 2,039 GB/s for the 40 GB, 80 GB PCIe and 80 GB SXM parts).
# fp32 is the CUDA-core (non-tensor) rate; fp64 the tensor-core FP64 rate (the vector rate is half).
PEAKS: dict[str, dict[str, float]] = {
    "H100 SXM": {"fp64": 66.9e12, "fp32": 66.9e12, "tf32": 494.7e12, "bf16": 989.4e12, "fp16": 989.4e12,
                 "fp8": 1978.9e12, "dram": 3.35e12},
    "H100 PCIe": {"fp64": 51.2e12, "fp32": 51.2e12, "tf32": 378.0e12, "bf16": 756.0e12, "fp16": 756.0e12,
                  "fp8": 1513.0e12, "dram": 2.0e12},
    "H200 SXM": {"fp64": 66.9e12, "fp32": 66.9e12, "tf32": 494.7e12, "bf16": 989.4e12, "fp16": 989.4e12,
                 "fp8": 1978.9e12, "dram": 4.8e12},
    "A100 SXM4 80GB": {"fp64": 19.5e12, "fp32": 19.5e12, "tf32": 156.0e12, "bf16": 312.0e12, "fp16": 312.0e12,
                       "dram": 2.039e12},
    "A100 PCIe 80GB": {"fp64": 19.5e12, "fp32": 19.5e12, "tf32": 156.0e12, "bf16": 312.0e12, "fp16": 312.0e12,
                       "dram": 1.935e12},
    "A100 40GB": {"fp64": 19.5e12, "fp32": 19.5e12, "tf32": 156.0e12, "bf16": 312.0e12, "fp16": 312.0e12,
                  "dram": 1.555e12},
}
FLOPS_NOTE = ("FlopCounterMode's count of one reference call (matrix products, convolutions, attention; "
              "elementwise work and reductions are not counted)")
BYTES_NOTE = "inputs read, outputs written and the model's parameters and buffers read, once each"


def table_entry(name: str, compute_capability: tuple[int, int] | None) -> str | None:
    """The PEAKS key for a CUDA device name (``torch.cuda.get_device_name``) and compute
    capability, or None for a device the table does not know (H100 NVL, H200 NVL, GH200 ...)."""
    n = name.upper()
    cc = tuple(compute_capability) if compute_capability is not None else None
    if "NVL" in n or "GH200" in n:
        return None
    if cc == (9, 0) and "H100" in n:
        if "PCIE" in n:
            return "H100 PCIe"
        if "HBM3" in n or "SXM" in n:
            return "H100 SXM"
        return None
    if cc == (9, 0) and "H200" in n:
        return "H200 SXM"
    if cc == (8, 0) and "A100" in n:
        if "80GB" in n:
            return "A100 PCIe 80GB" if "PCIE" in n else "A100 SXM4 80GB"
        return "A100 40GB"
    return None


def dtype_key(dtype: torch.dtype) -> str | None:
    return {torch.float64: "fp64", torch.float32: "fp32", torch.float16: "fp16",
            torch.bfloat16: "bf16"}.get(dtype)


def compute_dtype(out_dtypes: Sequence[torch.dtype], input_dtypes: Sequence[torch.dtype] = ()) -> torch.dtype | None:
    """The dtype whose peak applies: the first floating output's, else the first floating input's."""
    for d in (*out_dtypes, *input_dtypes):
        if d.is_floating_point and not d.is_complex:
            return d
    return None


def peaks(device_type: str, name: str, compute_capability: tuple[int, int] | None, dtype: torch.dtype | None,
          dram_bytes_s: float | None = None, dram_note: str = "") -> dict[str, Any]:
    """The peaks a call is measured against: ``flops_per_s`` and ``dram_bytes_s`` (None where
    unknown), where they came from, and a note."""
    out: dict[str, Any] = {"device": name, "dtype": str(dtype).removeprefix("torch.") if dtype else None,
                           "flops_per_s": None, "dram_bytes_s": None, "table": None, "dram_source": None}
    if device_type != "cuda":
        out["note"] = "no peaks for a CPU: achieved rates only"
        return out
    key = table_entry(name, compute_capability)
    out["table"] = key
    entry = PEAKS.get(key) if key else None
    notes = []
    if entry is None:
        notes.append(f"{name!r} (compute capability {compute_capability}) is not in the peak table "
                     "(evalfarm.judge.roofline.PEAKS)")
    elif dtype is None or dtype_key(dtype) not in entry:
        notes.append(f"no peak FLOP rate for {dtype} in the table")
    else:
        out["flops_per_s"] = entry[dtype_key(dtype)]  # type: ignore[index]
    if dram_bytes_s is not None and dram_bytes_s > 0 and math.isfinite(dram_bytes_s):
        out["dram_bytes_s"] = float(dram_bytes_s)
        out["dram_source"] = "nvml"
    elif entry is not None:
        out["dram_bytes_s"] = entry["dram"]
        out["dram_source"] = "table" + (f" (NVML: {dram_note})" if dram_note else "")
    if notes:
        out["note"] = "; ".join(notes)
    return out


@dataclasses.dataclass
class Counts:
    """What one call does, counted in the judge's set-up."""

    flops: int | None
    bytes_parts: dict[str, int]
    dtype: torch.dtype | None
    note: str = ""

    @property
    def bytes(self) -> int:
        return sum(self.bytes_parts.values())


class _FlopCount(JudgeDispatchMode):
    """FlopCounterMode's count (its formulas, ``torch.utils.flop_counter.flop_registry``, and its
    rule of decomposing ops it has no formula for), without its per-module bookkeeping and
    without importing torch._dynamo (evalfarm.judge.dispatch)."""

    def __init__(self) -> None:
        super().__init__()
        from torch.utils.flop_counter import flop_registry

        self.registry = flop_registry
        self.total = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        packet = func._overloadpacket
        if packet not in self.registry and func is not torch.ops.prim.device.default:
            with self:
                decomposed = func.decompose(*args, **kwargs)
                if decomposed is not NotImplemented:
                    return decomposed
        out = func(*args, **kwargs)
        formula = self.registry.get(packet)
        if formula is not None:
            self.total += int(formula(*args, **kwargs, out_val=out))
        return out


def count_flops(call: Callable[[], Any]) -> tuple[int | None, str]:
    """``call()``'s FLOPs as FlopCounterMode counts them, or None and why."""
    try:
        with torch.no_grad(), _FlopCount() as counter:
            call()
        return counter.total, ""
    except Exception as err:  # noqa: BLE001 - evidence only: no count rather than a failure
        return None, f"FLOPs not counted: {type(err).__name__}: {str(err)[:200]}"


def tensor_bytes(values: Any) -> int:
    if isinstance(values, torch.Tensor):
        return values.numel() * values.element_size()
    if isinstance(values, tuple | list):
        return sum(tensor_bytes(v) for v in values)
    return 0


def count(model: torch.nn.Module, inputs: Sequence[Any], out_struct: Sequence[tuple[tuple[int, ...], torch.dtype]],
          ) -> Counts:
    """FLOPs of one call of ``model`` on ``inputs`` and the bytes it must move."""
    from evalfarm.judge.memory_plan import module_bytes

    flops, note = count_flops(lambda: model(*inputs))
    parts = {"inputs": tensor_bytes(list(inputs)),
             "outputs": sum(math.prod(s) * d.itemsize for s, d in out_struct),
             "weights": module_bytes(model)}
    dtype = compute_dtype([d for _s, d in out_struct],
                          [v.dtype for v in inputs if isinstance(v, torch.Tensor)])
    return Counts(flops, parts, dtype, note)


def achieved(flops: int | None, nbytes: int, time_us: float, pk: dict[str, Any]) -> dict[str, Any]:
    """Rates of a call of ``time_us`` (median) and their fractions of the peaks (None where unknown)."""
    if not time_us > 0:
        return {"time_us": time_us, "tflops": None, "tbps": None, "flop_fraction": None, "byte_fraction": None}
    s = time_us * 1e-6
    flop_rate = flops / s if flops is not None else None
    byte_rate = nbytes / s
    fp, bp = pk.get("flops_per_s"), pk.get("dram_bytes_s")
    return {
        "time_us": time_us,
        "tflops": flop_rate / 1e12 if flop_rate is not None else None,
        "tbps": byte_rate / 1e12,
        "flop_fraction": flop_rate / fp if flop_rate is not None and fp else None,
        "byte_fraction": byte_rate / bp if bp else None,
    }


def evidence(counts: Counts, ref_us: float, cand_us: float, pk: dict[str, Any]) -> dict[str, Any]:
    """``evidence.roofline`` of an OK result."""
    out: dict[str, Any] = {
        "flops": counts.flops,
        "bytes": counts.bytes,
        "bytes_parts": dict(counts.bytes_parts),
        "arithmetic_intensity": counts.flops / counts.bytes if counts.flops is not None and counts.bytes else None,
        "ref": achieved(counts.flops, counts.bytes, ref_us, pk),
        "cand": achieved(counts.flops, counts.bytes, cand_us, pk),
        "peaks": pk,
        "flops_counted": FLOPS_NOTE,
        "bytes_counted": BYTES_NOTE,
    }
    if counts.note:
        out["note"] = counts.note
    elif counts.flops == 0:
        out["note"] = "no matrix product, convolution or attention in the task: 0 FLOPs counted"
    return out
