"""Comparing a candidate's output with the reference's: structure, NaN/Inf pattern, values.

The *strict* policy (default) is dtype- and scale-aware: the relative L2 error of the whole
output must be small, and every element must be within ``rtol * |ref| + atol * rms(ref)``.
Scaling the absolute term by the reference's RMS keeps tiny outputs from passing with
constants and large outputs from failing on rounding. The *kernelbench* policy is
``torch.allclose(out, ref, atol=1e-2, rtol=1e-2)``, KernelBench's own check.

Under both policies a constant output (e.g. all zeros) is rejected when the reference varies
by more than the dtype's relative tolerance: on tasks whose outputs are tiny, a constant
would otherwise pass an absolute tolerance.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

# dtype -> (max relative L2 error, elementwise rtol, elementwise atol as a fraction of rms(ref))
STRICT_TOLERANCES: dict[torch.dtype, tuple[float, float, float]] = {
    torch.float64: (1e-10, 1e-7, 1e-8),
    torch.float32: (1e-4, 1e-3, 1e-3),
    torch.float16: (5e-3, 1e-2, 1e-2),
    torch.bfloat16: (2e-2, 4e-2, 4e-2),
}
KERNELBENCH_ATOL = 1e-2
KERNELBENCH_RTOL = 1e-2


@dataclasses.dataclass
class Comparison:
    ok: bool
    reason: str = ""
    rel_l2_error: float = 0.0
    max_abs_error: float = 0.0
    worst_index: list[int] | None = None
    output_index: int = 0  # which tensor of a tuple output

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def describe(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"{type(value).__name__}(shape={tuple(value.shape)}, dtype={value.dtype}, device={value.device})"
    return type(value).__name__


def flatten_output(value: object) -> list[object]:
    """A module's output as a list: a tensor, or a tuple/list of tensors."""
    if isinstance(value, tuple | list):
        return list(value)
    return [value]


def check_structure(out: object, ref: object) -> str:
    """An empty string when out has exactly ref's structure (type, shape, dtype, device)."""
    outs, refs = flatten_output(out), flatten_output(ref)
    if isinstance(ref, tuple | list) != isinstance(out, tuple | list) or len(outs) != len(refs):
        return f"output structure differs: got {describe(out)}, expected {describe(ref)}"
    for i, (o, r) in enumerate(zip(outs, refs, strict=True)):
        if type(o) is not torch.Tensor:
            return f"output {i} has type {type(o).__module__}.{type(o).__qualname__}, expected exactly torch.Tensor"
        if o.shape != r.shape:
            return f"output {i} has shape {tuple(o.shape)}, expected {tuple(r.shape)}"
        if o.dtype != r.dtype:
            return f"output {i} has dtype {o.dtype}, expected {r.dtype}"
        if o.device != r.device:
            return f"output {i} is on {o.device}, expected {r.device}"
    return ""


def compare_tensor(out: torch.Tensor, ref: torch.Tensor, policy: str = "strict") -> Comparison:
    """Compare values of two tensors of equal shape/dtype/device."""
    if ref.numel() == 0:
        return Comparison(ok=True)
    if not (ref.is_floating_point() or ref.is_complex()):
        neq = out != ref
        if bool(neq.any()):
            idx = _unravel(int(neq.flatten().nonzero()[0]), ref.shape)
            return Comparison(False, f"integer/bool output differs at {idx}", worst_index=idx)
        return Comparison(ok=True)

    if torch.equal(out, ref):  # bit-identical (common for honest candidates): one kernel
        return Comparison(ok=True)
    all_finite = bool(torch.isfinite(ref).all()) and bool(torch.isfinite(out).all())
    if not all_finite:
        # NaN and Inf must appear in exactly the same places (with the same sign for Inf).
        out_nan, ref_nan = torch.isnan(out), torch.isnan(ref)
        if not torch.equal(out_nan, ref_nan):
            idx = _unravel(int((out_nan != ref_nan).flatten().nonzero()[0]), ref.shape)
            return Comparison(False, f"NaN pattern differs from the reference (first at {idx})", worst_index=idx)
        out_inf, ref_inf = torch.isinf(out), torch.isinf(ref)
        if not torch.equal(out_inf, ref_inf) or not torch.equal(out[ref_inf], ref[ref_inf]):
            bad = (out_inf != ref_inf) | (ref_inf & (out != ref))
            idx = _unravel(int(bad.flatten().nonzero()[0]), ref.shape)
            return Comparison(False, f"Inf pattern differs from the reference (first at {idx})", worst_index=idx)
        finite = ~(ref_nan | ref_inf)
        zero = torch.zeros((), dtype=out.dtype, device=out.device)
        out, ref = torch.where(finite, out, zero), torch.where(finite, ref, zero)
        n_finite = max(int(finite.sum()), 1)
    else:
        n_finite = max(ref.numel(), 1)

    if all_finite:
        problem = _constant_output(out, ref)
        if problem:
            return Comparison(False, problem)

    # float64 references are compared in float64; everything else in float32, which resolves
    # errors far below the tightest float32 tolerance and costs half the memory traffic.
    work = torch.float64 if ref.dtype in (torch.float64, torch.complex128) else torch.float32
    o, r = out.to(work), ref.to(work)
    diff = (o - r).abs()
    flat = diff.flatten()
    worst = int(torch.argmax(flat))
    max_abs = float(flat[worst])
    ref_norm = float(torch.linalg.vector_norm(r, dtype=torch.float64))
    err_norm = float(torch.linalg.vector_norm(diff, dtype=torch.float64))
    rel_l2 = err_norm / ref_norm if ref_norm > 0 else max_abs
    worst_idx = _unravel(worst, ref.shape)

    if policy == "kernelbench":
        ok = bool(torch.allclose(o, r, atol=KERNELBENCH_ATOL, rtol=KERNELBENCH_RTOL, equal_nan=True))
        reason = "" if ok else f"allclose(atol=rtol=1e-2) fails; max abs error {max_abs:.3g} at {worst_idx}"
        return Comparison(ok, reason, rel_l2, max_abs, worst_idx)

    max_rel_l2, rtol, atol_frac = STRICT_TOLERANCES.get(ref.dtype, STRICT_TOLERANCES[torch.float32])
    rms = ref_norm / n_finite**0.5
    if rel_l2 > max_rel_l2:
        return Comparison(
            False,
            f"relative L2 error {rel_l2:.3g} exceeds {max_rel_l2:g} for {ref.dtype} "
            f"(max abs error {max_abs:.3g} at {worst_idx})",
            rel_l2, max_abs, worst_idx,
        )
    allowed = rtol * r.abs() + atol_frac * rms
    excess = diff - allowed
    if bool((excess > 0).any()):
        i = int(torch.argmax(excess.flatten()))
        idx = _unravel(i, ref.shape)
        return Comparison(
            False,
            f"element {idx} differs by {float(diff.flatten()[i]):.3g} "
            f"(reference {float(r.flatten()[i]):.6g}, allowed {float(allowed.flatten()[i]):.3g})",
            rel_l2, max_abs, idx,
        )
    return Comparison(True, "", rel_l2, max_abs, worst_idx)


def _constant_output(out: torch.Tensor, ref: torch.Tensor) -> str:
    """Why ``out`` is a constant standing in for a varying reference ("" when it is not).

    The reference "varies" when its spread exceeds the dtype's elementwise rtol times its
    largest magnitude, so an honest constant approximation of a (nearly) constant reference
    is never flagged. Both tensors are finite and of equal shape.
    """
    if ref.numel() < 2:
        return ""
    first = out.flatten()[0]
    if not bool((out == first).all()):
        return ""
    r_min, r_max = (float(v) for v in torch.aminmax(ref.flatten().to(torch.float64)))
    rtol = STRICT_TOLERANCES.get(ref.dtype, STRICT_TOLERANCES[torch.float32])[1]
    if r_max - r_min <= rtol * max(abs(r_min), abs(r_max)):
        return ""
    value = float(first)
    shown = "0.0" if value == 0 else f"{value:.6g}"
    return (f"output is constant (all {shown}) while the reference varies "
            f"(from {r_min:.3g} to {r_max:.3g})")


def compare_outputs(out: object, ref: object, policy: str = "strict") -> Comparison:
    """Structure first, then values of each tensor; the first failure is reported."""
    problem = check_structure(out, ref)
    if problem:
        return Comparison(False, problem)
    worst = Comparison(ok=True)
    for i, (o, r) in enumerate(zip(flatten_output(out), flatten_output(ref), strict=True)):
        c = compare_tensor(o, r, policy)  # type: ignore[arg-type]
        c.output_index = i
        if not c.ok:
            return c
        if c.rel_l2_error >= worst.rel_l2_error:
            worst = c
    return worst


def _unravel(flat_index: int, shape: torch.Size) -> list[int]:
    idx = []
    for dim in reversed(shape):
        idx.append(flat_index % dim if dim else 0)
        flat_index //= dim if dim else 1
    return list(reversed(idx))
