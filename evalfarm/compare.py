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
import math
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
# Values are compared this many elements at a time (64 MiB of float32 per temporary).
CHUNK_ELEMENTS = 1 << 24
# The strict policy's elementwise pass is skipped when the largest |out - ref| is within the
# smallest bound any element gets (see _judged); False runs it always (tests hold both equal).
ELEMENTWISE_SHORTCUT = True
# Norms of float32 data longer than NORM_FLOAT64_UP_TO elements: the squares summed in float32
# over rows of NORM_ROW elements, the rows' norms then in float64 (``_rows_norm``).
# ``vector_norm(x, dtype=float64)`` first writes a float64 copy of ``x``: two of its three passes
# over the data, for each norm; shorter data keeps it (exact, and the copy is cheap).
NORM_FLOAT64_UP_TO = 4096
NORM_ROW = 512
# Such a norm of the reference below this is computed again in float64: its squares of elements
# under about 1e-19 underflow in float32 (a norm that overflowed, not finite, is too).
NORM_TRUSTED_FROM = 1e-6


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


def _flat(t: torch.Tensor) -> torch.Tensor:
    """A 1-D view of ``t`` (a same-dtype copy only when ``t`` is not contiguous)."""
    return t.reshape(-1) if t.is_contiguous() else t.contiguous().reshape(-1)


def _chunks(n: int, chunk: int) -> range:
    return range(0, n, max(1, chunk))


def _rows_norm(x: torch.Tensor) -> torch.Tensor:
    """The L2 norm of the 1-D tensor ``x`` as a 0-d float64 tensor, queued (no synchronisation).
    float64 data, and anything of at most ``NORM_FLOAT64_UP_TO`` elements, in float64 throughout; longer
    float32 data in float32 row by row (``NORM_ROW`` elements a row: a relative error under 1e-6
    at these lengths), then the rows' norms in float64. Two passes fewer over the data than a
    float64 copy; for a norm that may have lost its small squares, see ``_norm_trusted``."""
    n = x.numel()
    if x.dtype == torch.float64 or n <= NORM_FLOAT64_UP_TO:
        return torch.linalg.vector_norm(x, dtype=torch.float64)
    k = min(NORM_ROW, n)
    m = n // k
    rows = torch.linalg.vector_norm(x[:m * k].view(m, k), dim=1)
    if n > m * k:
        rows = torch.cat([rows, torch.linalg.vector_norm(x[m * k:]).reshape(1)])
    return torch.linalg.vector_norm(rows, dtype=torch.float64)


def _norm_trusted(ref_norm: float, x: torch.Tensor) -> bool:
    """Whether ``_rows_norm`` of a reference ``x`` (``ref_norm``) holds without a float64 pass:
    finite (no square overflowed) and, where squares were summed in float32, at least
    ``NORM_TRUSTED_FROM`` (the squares that underflow in float32, at most 1.2e-38 each, then weigh
    less than 1e-18 of the norm's square over a chunk of up to 2^24 elements). The norm of ``|out - ref|`` beside such a
    reference needs finiteness only: what underflows in it is far below any tolerance."""
    if not math.isfinite(ref_norm):
        return False
    return x.dtype == torch.float64 or x.numel() <= NORM_FLOAT64_UP_TO or ref_norm >= NORM_TRUSTED_FROM


def _norms(r: torch.Tensor, diff: torch.Tensor) -> tuple[float, float]:
    """(norm of ``r``, norm of ``diff``) as floats: ``_rows_norm``'s, or float64 copies' where that
    of ``r`` is not trusted (``_norm_trusted``)."""
    ref_norm, err_norm = (float(v) for v in torch.stack([_rows_norm(r), _rows_norm(diff)]).tolist())
    if _norm_trusted(ref_norm, r):
        return ref_norm, err_norm
    return (float(torch.linalg.vector_norm(r, dtype=torch.float64)),
            float(torch.linalg.vector_norm(diff, dtype=torch.float64)))


def compare_tensor(out: torch.Tensor, ref: torch.Tensor, policy: str = "strict",
                   chunk_elements: int | None = None) -> Comparison:
    """Compare values of two tensors of equal shape/dtype/device.

    The work is done in chunks of ``chunk_elements`` (default ``CHUNK_ELEMENTS``): the extra
    memory is a few chunk-sized temporaries whatever the output's size, never a whole-output
    float32/float64 copy (a multi-GB output on a nearly full GPU compares without running out
    of memory). Norms are accumulated in float64, so the result is the whole-tensor one."""
    chunk = chunk_elements or CHUNK_ELEMENTS
    if ref.numel() == 0:
        return Comparison(ok=True)
    o_all, r_all = _flat(out), _flat(ref)
    n = r_all.numel()
    if not (ref.is_floating_point() or ref.is_complex()):
        for s in _chunks(n, chunk):
            neq = o_all[s:s + chunk] != r_all[s:s + chunk]
            if bool(neq.any()):
                idx = _unravel(s + int(neq.nonzero()[0]), ref.shape)
                return Comparison(False, f"integer/bool output differs at {idx}", worst_index=idx)
        return Comparison(ok=True)

    if torch.equal(out, ref):  # bit-identical (common for honest candidates): one kernel
        return Comparison(ok=True)
    if not ref.is_complex():
        fast = _compare_finite(o_all, r_all, ref, policy, chunk)
        if fast is not None:
            return fast
    return _compare_general(o_all, r_all, ref, policy, chunk)


@dataclasses.dataclass
class _Errors:
    """Whole-tensor error figures, accumulated chunk by chunk."""

    ref_sq: float = 0.0  # squared float64 norm of the reference
    err_sq: float = 0.0  # squared float64 norm of |out - ref|
    max_abs: float = -1.0
    worst: int = 0  # flat index of the first largest |out - ref|
    close: bool = True  # allclose at KernelBench's tolerances so far (policy "kernelbench")

    def add(self, s: int, o: torch.Tensor, r: torch.Tensor, diff: torch.Tensor, ref_norm: float,
            err_norm: float, policy: str) -> None:
        m, i = torch.max(diff, 0)  # the first index of the largest difference, as argmax
        if float(m) > self.max_abs:
            self.max_abs, self.worst = float(m), s + int(i)
        self.ref_sq += ref_norm ** 2
        self.err_sq += err_norm ** 2
        if policy == "kernelbench" and self.close:
            self.close = bool(torch.allclose(o, r, atol=KERNELBENCH_ATOL, rtol=KERNELBENCH_RTOL, equal_nan=True))


def _judged(errors: _Errors, ref: torch.Tensor, policy: str, n_counted: int, pieces: Any) -> Comparison:
    """The Comparison from the accumulated errors: KernelBench's allclose, or the strict policy's
    relative L2 error and then its elementwise bound over ``pieces()`` ((start, ref chunk,
    |out - ref| chunk) in the working dtype); ``n_counted`` places make up the reference's RMS."""
    ref_norm, err_norm = errors.ref_sq ** 0.5, errors.err_sq ** 0.5
    max_abs = errors.max_abs
    rel_l2 = err_norm / ref_norm if ref_norm > 0 else max_abs
    worst_idx = _unravel(errors.worst, ref.shape)
    if policy == "kernelbench":
        reason = "" if errors.close else f"allclose(atol=rtol=1e-2) fails; max abs error {max_abs:.3g} at {worst_idx}"
        return Comparison(errors.close, reason, rel_l2, max_abs, worst_idx)
    max_rel_l2, rtol, atol_frac = STRICT_TOLERANCES.get(ref.dtype, STRICT_TOLERANCES[torch.float32])
    rms = ref_norm / max(n_counted, 1) ** 0.5
    if rel_l2 > max_rel_l2:
        return Comparison(
            False,
            f"relative L2 error {rel_l2:.3g} exceeds {max_rel_l2:g} for {ref.dtype} "
            f"(max abs error {max_abs:.3g} at {worst_idx})",
            rel_l2, max_abs, worst_idx,
        )
    # Every element's bound is rtol * |ref| + atol, computed in the working dtype, and so never
    # below atol rounded to that dtype (|ref| * rtol >= 0, rounding is monotone): when no
    # difference exceeds that, no element can fail, and the pass over the data below (about
    # half the comparison's memory traffic) would find nothing. Same verdict, same numbers.
    work = torch.float64 if ref.dtype in (torch.float64, torch.complex128) else torch.float32
    least_allowed = float(torch.tensor(atol_frac * rms, dtype=work))
    if ELEMENTWISE_SHORTCUT and max_abs <= least_allowed:
        return Comparison(True, "", rel_l2, max_abs, worst_idx)
    top: tuple[float, int, float, float, float] | None = None  # excess, index, diff, ref, allowed
    for s, r, diff in pieces():
        allowed = r.abs().mul_(rtol).add_(atol_frac * rms)  # rtol * |ref| + atol_frac * rms
        excess = torch.sub(diff, allowed)
        if float(excess.max()) > 0:  # only then the index
            m, i = torch.max(excess, 0)
            if top is None or float(m) > top[0]:
                j = int(i)
                top = (float(m), s + j, float(diff[j]), float(r[j]), float(allowed[j]))
    if top is not None:
        idx = _unravel(top[1], ref.shape)
        return Comparison(
            False,
            f"element {idx} differs by {top[2]:.3g} (reference {top[3]:.6g}, allowed {top[4]:.3g})",
            rel_l2, max_abs, idx,
        )
    return Comparison(True, "", rel_l2, max_abs, worst_idx)


def _compare_finite(o_all: torch.Tensor, r_all: torch.Tensor, ref: torch.Tensor, policy: str,
                    chunk: int) -> Comparison | None:
    """``compare_tensor``'s result when every element of both tensors is finite, else None.

    The same quantities as ``_compare_general``, with fewer passes over the data: finiteness is
    read off the float64 norms the error needs anyway (the norm of the reference is finite only
    when all its elements are, that of ``|out - ref|`` only when all of ``out``'s are too, given a
    finite reference); any non-finite norm, an overflow in ``out - ref`` included, hands the whole
    comparison to ``_compare_general``. With one chunk, the elementwise pass reuses the first
    pass's ``|out - ref|``. Verdicts, reasons and numbers are the general path's, bit for bit."""
    n = r_all.numel()
    work = torch.float64 if ref.dtype == torch.float64 else torch.float32
    kept: tuple[torch.Tensor, torch.Tensor] | None = None  # (ref, |out - ref|) of the only chunk
    errors = _Errors()
    for s in _chunks(n, chunk):
        o, r = o_all[s:s + chunk].to(work), r_all[s:s + chunk].to(work)
        diff = torch.sub(o, r).abs_()
        ref_norm, err_norm = _norms(r, diff)
        if not (math.isfinite(ref_norm) and math.isfinite(err_norm)):
            return None
        errors.add(s, o, r, diff, ref_norm, err_norm, policy)
        if n <= chunk:
            kept = (r, diff)
        del o, r, diff
    problem_text = _constant_output(o_all, r_all, ref.dtype, chunk, finite_only=False)
    if problem_text:
        return Comparison(False, problem_text)

    def pieces() -> Any:
        if kept is not None:
            yield 0, kept[0], kept[1]
            return
        for s in _chunks(n, chunk):
            o, r = o_all[s:s + chunk].to(work), r_all[s:s + chunk].to(work)
            yield s, r, torch.sub(o, r).abs_()

    return _judged(errors, ref, policy, n, pieces)


def _compare_general(o_all: torch.Tensor, r_all: torch.Tensor, ref: torch.Tensor, policy: str,
                     chunk: int) -> Comparison:
    """``compare_tensor`` for any floating or complex pair, NaN and Inf included."""
    n = r_all.numel()
    all_finite = all(bool(torch.isfinite(t[s:s + chunk]).all()) for t in (r_all, o_all) for s in _chunks(n, chunk))
    n_finite = n
    if not all_finite:
        # NaN and Inf must appear in exactly the same places (with the same sign for Inf).
        problem = _nonfinite_pattern(o_all, r_all, ref.shape, chunk)
        if problem is not None:
            return problem
        n_finite = sum(int(torch.isfinite(r_all[s:s + chunk]).sum()) for s in _chunks(n, chunk))

    # Also where the reference has NaN/Inf (matched above): the constant is judged over the
    # finite places, so NaN where the reference has NaN plus zeros elsewhere is still caught.
    problem_text = _constant_output(o_all, r_all, ref.dtype, chunk, finite_only=not all_finite)
    if problem_text:
        return Comparison(False, problem_text)

    # float64 references are compared in float64; everything else in float32, which resolves
    # errors far below the tightest float32 tolerance and costs half the memory traffic.
    work = torch.float64 if ref.dtype in (torch.float64, torch.complex128) else torch.float32

    def pieces() -> Any:
        """(start, out chunk, ref chunk, |out - ref|) in the working dtype, non-finite places zeroed."""
        for s in _chunks(n, chunk):
            o, r = o_all[s:s + chunk].to(work), r_all[s:s + chunk].to(work)
            if not all_finite:
                finite = torch.isfinite(r)
                zero = torch.zeros((), dtype=work, device=r.device)
                o, r = torch.where(finite, o, zero), torch.where(finite, r, zero)
            yield s, o, r, torch.sub(o, r).abs_()

    errors = _Errors()
    for s, o, r, diff in pieces():
        errors.add(s, o, r, diff, *_norms(r, diff), policy)
    return _judged(errors, ref, policy, n_finite, lambda: ((s, r, diff) for s, _o, r, diff in pieces()))


def _nonfinite_pattern(o_all: torch.Tensor, r_all: torch.Tensor, shape: torch.Size, chunk: int) -> Comparison | None:
    """A failed Comparison when NaN or Inf places (or Inf signs) differ, else None."""
    n = r_all.numel()
    for s in _chunks(n, chunk):
        o, r = o_all[s:s + chunk], r_all[s:s + chunk]
        bad = torch.isnan(o) != torch.isnan(r)
        if bool(bad.any()):
            idx = _unravel(s + int(bad.nonzero()[0]), shape)
            return Comparison(False, f"NaN pattern differs from the reference (first at {idx})", worst_index=idx)
    for s in _chunks(n, chunk):
        o, r = o_all[s:s + chunk], r_all[s:s + chunk]
        out_inf, ref_inf = torch.isinf(o), torch.isinf(r)
        bad = (out_inf != ref_inf) | (ref_inf & (o != r))
        if bool(bad.any()):
            idx = _unravel(s + int(bad.nonzero()[0]), shape)
            return Comparison(False, f"Inf pattern differs from the reference (first at {idx})", worst_index=idx)
    return None


def _constant_output(o_all: torch.Tensor, r_all: torch.Tensor, dtype: torch.dtype, chunk: int,
                     finite_only: bool = False) -> str:
    """Why ``out`` is a constant standing in for a varying reference ("" when it is not).

    The reference "varies" when its spread exceeds the dtype's elementwise rtol times its
    largest magnitude, so an honest constant approximation of a (nearly) constant reference
    is never flagged. Both tensors are flat and of equal length; with ``finite_only`` only the
    places where the reference is finite count (its NaN/Inf places were matched already).
    """
    n = r_all.numel()
    if n < 2:
        return ""
    if not finite_only and bool(o_all[0] != o_all[n - 1]):  # not constant: what the scan below finds
        return ""

    def pieces() -> Any:
        for s in _chunks(n, chunk):
            o, r = o_all[s:s + chunk], r_all[s:s + chunk]
            if finite_only:
                keep = torch.isfinite(r)
                o, r = o[keep], r[keep]
            if r.numel():
                yield o, r

    first = None
    lows, highs = [], []
    for o, r in pieces():
        if first is None:
            first = o[0]
        if not bool((o == first).all()):
            return ""
        lo, hi = torch.aminmax(r)
        lows.append(float(lo))
        highs.append(float(hi))
    if first is None:
        return ""
    r_min, r_max = min(lows), max(highs)
    rtol = STRICT_TOLERANCES.get(dtype, STRICT_TOLERANCES[torch.float32])[1]
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


# The scalars ``queued_check`` leaves on the device, in this order (float64): for floating-point
# tensors, and for the others (whether they are equal, as torch.equal says).
_QUEUED = ("ref_norm", "err_norm", "max_abs", "worst", "varies")
_QUEUED_EXACT = ("equal",)


def queued_check(out: torch.Tensor, ref: torch.Tensor, policy: str = "strict") -> torch.Tensor | None:
    """The device work of ``compare_tensor`` for a pair that passes, queued without waiting for the
    device: a float64 tensor of ``_QUEUED``'s scalars (``_QUEUED_EXACT``'s for integer and bool
    tensors), from which ``passed`` returns the very
    Comparison ``compare_tensor`` would (the same operations on the same data), or None where it
    could fail. None where only ``compare_tensor`` answers: the kernelbench policy, complex
    tensors, fewer than 2 or more than ``CHUNK_ELEMENTS`` elements. Shapes and dtypes must match
    (``check_structure``)."""
    n = ref.numel()
    if policy != "strict" or ref.is_complex() or n < 2 or n > CHUNK_ELEMENTS:
        return None
    o_all, r_all = _flat(out), _flat(ref)
    if not ref.is_floating_point():
        return torch.eq(o_all, r_all).all().to(torch.float64).reshape(1)  # torch.equal's answer
    work = torch.float64 if ref.dtype == torch.float64 else torch.float32
    o, r = o_all.to(work), r_all.to(work)
    diff = torch.sub(o, r).abs_()
    ref_norm, err_norm = _rows_norm(r), _rows_norm(diff)
    m, i = torch.max(diff, 0)  # the first index of the largest difference, as _Errors.add takes it
    varies = (o_all[0] != o_all[n - 1]).to(torch.float64)  # _constant_output's first look
    return torch.stack([ref_norm, err_norm, m.to(torch.float64), i.to(torch.float64), varies])


class _NeedsData(Exception):
    """``_judged`` asked for the elementwise pass, which only the data can answer."""


def _needs_data() -> Any:
    raise _NeedsData


def passed(values: list[float], ref: torch.Tensor) -> Comparison | None:
    """``compare_tensor``'s Comparison from ``queued_check``'s scalars (read back) when the pair
    passes with them alone: equal, or finite, not constant, and passed by ``_judged`` without its
    elementwise pass (within the relative L2 bound, no difference above the smallest bound any
    element gets). None otherwise: ``compare_tensor`` then decides, with its reasons and numbers."""
    if not ref.is_floating_point():
        return Comparison(ok=True) if values[0] else None
    ref_norm, err_norm, max_abs, worst, varies = values
    if not (math.isfinite(ref_norm) and math.isfinite(err_norm)):
        return None  # NaN or Inf somewhere (or a float32 square that overflowed): compare_tensor decides
    if max_abs == 0:
        # Finite and no difference anywhere: torch.equal holds (NaN would have made both the largest
        # difference and a norm NaN), compare_tensor's first answer.
        return Comparison(ok=True)
    if not varies or not _norm_trusted(ref_norm, ref):
        return None
    # As _Errors.add accumulates a single chunk.
    errors = _Errors(ref_sq=ref_norm ** 2, err_sq=err_norm ** 2, max_abs=max_abs, worst=int(worst))
    try:
        c = _judged(errors, ref, "strict", ref.numel(), _needs_data)
    except _NeedsData:
        return None
    return c if c.ok else None


def _unravel(flat_index: int, shape: torch.Size) -> list[int]:
    idx = []
    for dim in reversed(shape):
        idx.append(flat_index % dim if dim else 0)
        flat_index //= dim if dim else 1
    return list(reversed(idx))
