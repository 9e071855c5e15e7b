"""The precision gate: a candidate may be no less accurate than the task's own reference.

Tolerances alone do not say that. KernelBench's inputs are mostly uniform in [0, 1): with no
cancellation in its sums, an fp32 matmul computed with TF32 (10-bit mantissas) or in bf16 stays
within a 1e-4 relative L2 tolerance while its error against the exact result is tens to
hundreds of times the fp32 reference's (measured on an H100: 47x for TF32, paid 6.02x; 385x for
bf16, paid 1.71x). So, on a few correctness rounds, the judge also computes the task in float64
(the task's own Model and inputs cast up; the judge, which is trusted, already builds that model
in its set-up) and compares both the reference worker's output of the round (the task's own
precision) and the candidate's against it:

    pass  when  cand_error <= k * ref_error + floor

* **error**: the relative L2 error of one output tensor against the float64 result,
  ``||x - g|| / ||g||`` over the places where the ground truth, the reference and the candidate
  are all finite (their NaN/Inf patterns were already matched by the tolerance check), on at most
  ``SAMPLE_ELEMENTS`` random places of a larger output; each group of rounds (the task's own
  inputs, widened inputs: below) is summarised by the RMS of its rounds' errors, so one round
  where the reference happened to be lucky does not decide.
* **k**: ``K`` (2) for float32 outputs, ``K_HALF`` (3) for float16/bfloat16 ones: PyTorch's
  compiler accuracy check (``torch._dynamo.utils.same`` with an fp64 reference: 2x, 3x for half
  types); FlashAttention's tests use 2x. Small outputs get PyTorch's larger multipliers (torch
  2.13: 10x up to 10 elements and 8x up to 500 where ``use_larger_multiplier_for_smaller_tensor``
  is set, 3x below 1000): the ratio of two errors over a handful of numbers is noisy.
* **floor**: ``FLOOR_ULPS`` units of the output dtype's unit roundoff (float32: 32 x 2^-24 =
  1.9e-6; float16 and bfloat16: 4 units), for references that are exact or nearly so (a copy, a
  scaling, a correctly rounded op, a CPU scan accumulated in double), where a different but
  honest rounding of the same formula would be many times the reference's error. In float32
  the honest differences grow with the size of a sum (a sequential scan over 4096 terms: 16
  units) while reduced precision sits far above (TF32 on a 4096-deep uniform [0, 1) matmul: 90
  units; on signed inputs thousands); a half-precision output's own rounding dominates, so its
  honest variants stay within 1.5 units. Calibration: docs/security.md, "The precision gate",
  and benchmarks/precision_calibration.py.

Widened inputs: uniform [0, 1) inputs hide reduced precision (all products positive, no
cancellation), so some gated rounds draw their inputs from a wider distribution: each input that
looks like ``torch.rand`` (``widening_spec``: floating, non-negative, not integer-valued, not a
probability vector, more than one element) gets an independent random sign per element (a
symmetric matrix a symmetric sign pattern; zeros stay zero, so triangular and sparse patterns
hold); magnitudes are kept. Integer, bool, complex and non-tensor inputs never change. Widening
is used only where the task's reference, in its own dtype, returns finite outputs of the same
structure on every widened round drawn (checked in the set-up); otherwise those rounds use the
task's own inputs. Widened rounds are correctness rounds like any other: both workers get the
same widened inputs, and the tolerance check applies to them too.

Integer, bool and complex outputs are compared exactly or by tolerance only (no gate); float64
outputs have no higher-precision ground truth here (no gate). ``ScoreConfig.precision =
"tolerance"`` and the ``paper`` guard policy keep the tolerance check alone.

The ground truth is computed in the judge's set-up, before the workers load, on the evaluation's
device (then on the CPU where the device cannot run the task in float64 or has no room for it,
when the task is small enough: ``CPU_FALLBACK_MAX_FLOPS``), and kept on the host; the rounds
draw the same inputs again from the same secret seeds (checked by a fingerprint of each input).
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from evalfarm.judge.dispatch import JudgeDispatchMode

K = 2.0
K_HALF = 3.0
HALF_DTYPES = (torch.float16, torch.bfloat16)
# (at most this many elements, multiplier): torch._dynamo.utils.same's for small tensors (torch 2.13).
SMALL_OUTPUT_MULTIPLIERS = ((10, 10.0), (500, 8.0), (999, 3.0))
# The floor, in units of the output dtype's unit roundoff (float32: 2^-24 = 5.96e-8, so 32 units
# are 1.9e-6; float16: 2^-11, bfloat16: 2^-8, 4 units each). Calibration: docs/security.md.
FLOOR_ULPS = {torch.float32: 32.0}
FLOOR_ULPS_OTHER = 4.0  # float16, bfloat16 (and any narrower float)
# Gated rounds: this many with the task's own inputs and this many with widened inputs (fewer where
# there are fewer correctness rounds), chosen at random among the correctness rounds.
TASK_ROUNDS = 4
WIDENED_ROUNDS = 4
# An output is compared on at most this many places (drawn at random, with replacement), so the
# ground truth kept on the host and the comparison stay small whatever the output's size.
SAMPLE_ELEMENTS = 1 << 20
# Where the device cannot compute the task in float64 (no kernel, no memory), the CPU does it
# when one call counts at most this many FLOPs (FlopCounterMode) and its float64 inputs and
# outputs take at most CPU_FALLBACK_MAX_BYTES.
CPU_FALLBACK_MAX_FLOPS = 2e10
CPU_FALLBACK_MAX_BYTES = 2 << 30
# Ops seen computing below float64 from float64 tensors are named in the note, up to this many.
MAX_DOWNCAST_NAMES = 5
TASK, WIDENED = "task", "widened"
METRIC = ("relative L2 error against a float64 ground truth (the task's Model and inputs cast up), "
          "RMS over the group's rounds")


class NoGroundTruth(Exception):
    """The task cannot be computed in float64 here (the message says why)."""


def unit_roundoff(dtype: torch.dtype) -> float:
    """Half the machine epsilon: the largest relative error of rounding to ``dtype``."""
    return torch.finfo(dtype).eps / 2


def multiplier(dtype: torch.dtype, numel: int) -> float:
    """k for an output of ``dtype`` with ``numel`` elements."""
    base = K_HALF if dtype in HALF_DTYPES else K
    for most, k in SMALL_OUTPUT_MULTIPLIERS:
        if numel <= most:
            return max(k, base)
    return base


def floor_for(dtype: torch.dtype) -> float:
    return FLOOR_ULPS.get(dtype, FLOOR_ULPS_OTHER) * unit_roundoff(dtype)


def gated_dtype(dtype: torch.dtype) -> bool:
    """Outputs the gate applies to: floating, real, below float64."""
    return dtype.is_floating_point and not dtype.is_complex and dtype != torch.float64


def not_applied_reason(precision: str, guard_policy: str, out_dtypes: Sequence[torch.dtype]) -> str:
    """Why the gate does not apply to this evaluation ("" when it does)."""
    if precision == "tolerance":
        return "precision=tolerance: outputs are checked by tolerance only"
    if guard_policy == "paper":
        return "guard policy paper (KernelBench's rules): outputs are checked by tolerance only"
    if not any(gated_dtype(d) for d in out_dtypes):
        kinds = sorted({str(d).removeprefix("torch.") for d in out_dtypes})
        return (f"no float16/bfloat16/float32 output ({', '.join(kinds)}): integer and bool outputs are compared "
                "exactly, float64 ones have no higher-precision ground truth here")
    return ""


def choose_rounds(n_correct: int, rng: random.Random) -> tuple[list[int], list[int]]:
    """(rounds gated with the task's inputs, rounds gated with widened inputs), disjoint, chosen
    at random among the correctness rounds ``0 .. n_correct - 1`` with the judge's secret
    generator; widened rounds only where there are at least two."""
    total = min(n_correct, TASK_ROUNDS + WIDENED_ROUNDS)
    picked = rng.sample(range(n_correct), total)
    n_widened = min(WIDENED_ROUNDS, total // 2)
    return sorted(picked[n_widened:]), sorted(picked[:n_widened])


# --- widened inputs ----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class WidenSpec:
    """Which inputs (by position) get random signs, and which of them are symmetric matrices."""

    positions: tuple[int, ...] = ()
    symmetric: tuple[bool, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.positions)


def _is_simplex(t: torch.Tensor) -> bool:
    """Whether ``t`` sums to 1 along some dimension (probability vectors)."""
    for d in range(t.dim()):
        if t.shape[d] > 1:
            s = t.sum(dim=d, dtype=torch.float64)
            if bool(torch.allclose(s, torch.ones_like(s), rtol=1e-3, atol=1e-3)):
                return True
    return False


def widenable(t: Any) -> str:
    """Why input ``t`` is not widened ("" when it is)."""
    if not isinstance(t, torch.Tensor):
        return "not a tensor"
    if not t.is_floating_point() or t.is_complex():
        return f"{t.dtype}: integer, bool and complex inputs never change"
    if t.numel() < 2:
        return "a single number"
    if not bool((t >= 0).all()):
        return "already signed (or not finite) as drawn"
    if bool((t == t.round()).all()):
        return "integer-valued (a mask, one-hot, count or index)"
    if _is_simplex(t):
        return "a probability vector (sums to 1)"
    return ""


def widening_spec(sample: Sequence[Any]) -> tuple[WidenSpec, list[str]]:
    """The inputs of a draw of the task's own ``get_inputs`` that widening changes, and a note per
    floating tensor input it leaves alone."""
    positions: list[int] = []
    symmetric: list[bool] = []
    notes: list[str] = []
    for i, v in enumerate(sample):
        why = widenable(v)
        if why:
            if isinstance(v, torch.Tensor) and v.is_floating_point():
                notes.append(f"input {i} not widened: {why}")
            continue
        positions.append(i)
        symmetric.append(v.dim() >= 2 and v.shape[-1] == v.shape[-2] and torch.equal(v, v.transpose(-1, -2)))
    return WidenSpec(tuple(positions), tuple(symmetric)), notes


def widen(values: Sequence[Any], spec: WidenSpec, seed: int) -> list[Any]:
    """``values`` with a random sign on every element of the inputs ``spec`` names (new tensors:
    the task's own may be shared); the signs come from ``seed``, on each tensor's own device."""
    out = list(values)
    for k, (i, sym) in enumerate(zip(spec.positions, spec.symmetric, strict=True)):
        if i >= len(out) or not isinstance(out[i], torch.Tensor) or not out[i].is_floating_point():
            continue
        v = out[i]
        gen = torch.Generator(device=v.device)
        gen.manual_seed((seed + 7919 * k) % (1 << 63))
        signs = torch.randint(0, 2, v.shape, generator=gen, device=v.device, dtype=torch.int8).mul_(2).sub_(1)
        if sym and v.dim() >= 2 and v.shape[-1] == v.shape[-2]:
            signs = signs.triu() + signs.triu(1).transpose(-1, -2)
        out[i] = v * signs
    return out


def widened_refusal(call: Callable[[list[Any]], Any], inputs: list[Any],
                    expected: Sequence[tuple[tuple[int, ...], torch.dtype]]) -> str:
    """Why the task refuses widened ``inputs`` ("" when it takes them): its reference raises,
    returns another structure, or returns a non-finite value."""
    try:
        out = call(inputs)
    except Exception as err:  # noqa: BLE001 - the task refuses them: no widening
        return f"the reference raised {type(err).__name__}: {str(err)[:200]}"
    outs = list(out) if isinstance(out, tuple | list) else [out]
    if len(outs) != len(expected):
        return "the reference returned another number of outputs"
    for j, (o, (shape, dtype)) in enumerate(zip(outs, expected, strict=True)):
        if not isinstance(o, torch.Tensor) or tuple(o.shape) != tuple(shape) or o.dtype != dtype:
            return f"the reference's output {j} changed its shape or dtype"
        if o.is_floating_point() and not bool(torch.isfinite(o).all()):
            return f"the reference's output {j} is not finite"
    return ""


# --- the ground truth --------------------------------------------------------------------------

def _tensors(value: Any) -> list[torch.Tensor]:
    return [x for x in tree_flatten(value)[0] if isinstance(x, torch.Tensor)]


class _Downcasts(JudgeDispatchMode):
    """Names the ops that compute a float below float64 from a float64 tensor (an explicit cast or
    a dtype fixed inside the task's forward): where any does, float64 is not a ground truth."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if len(self.names) < MAX_DOWNCAST_NAMES:
            if any(t.dtype == torch.float64 for t in _tensors((args, kwargs))) and any(
                    t.is_floating_point() and t.dtype != torch.float64 for t in _tensors(out)):
                name = str(getattr(func, "__name__", func))
                if name not in self.names:
                    self.names.append(name)
        return out


def to_float64(values: Sequence[Any], device: torch.device | None = None) -> list[Any]:
    """Floating (real) tensors cast to float64 (and moved to ``device`` when given); the rest kept
    (moved too)."""
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            if v.is_floating_point() and not v.is_complex():
                v = v.to(device=device or v.device, dtype=torch.float64)
            elif device is not None:
                v = v.to(device)
        out.append(v)
    return out


def float64_call(model: torch.nn.Module, inputs: Sequence[Any]) -> list[torch.Tensor]:
    """The float64 model's outputs on the float64 inputs, with fresh floating tensors float64 by
    default; NoGroundTruth when an op computes below float64 from float64 data or an output is
    not a tensor."""
    watch = _Downcasts()
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with torch.no_grad(), watch:
            out = model(*inputs)
    finally:
        torch.set_default_dtype(previous)
    if watch.names:
        raise NoGroundTruth(f"the task computes below float64 even when cast up ({', '.join(watch.names)})")
    outs = list(out) if isinstance(out, tuple | list) else [out]
    if not all(isinstance(o, torch.Tensor) for o in outs):
        raise NoGroundTruth("the float64 model returned something other than tensors")
    return outs


def fingerprint(values: Sequence[Any]) -> list[Any]:
    """A cheap check that two draws are the same: per tensor its float64 sum and norm (the same
    reduction over the same data on the same device gives the same bits), per other value itself."""
    out: list[Any] = []
    for v in values:
        if isinstance(v, torch.Tensor):
            t = torch.view_as_real(v) if v.is_complex() else v
            t = t.contiguous()
            if t.is_floating_point():
                out.append((float(torch.sum(t, dtype=torch.float64)),
                            float(torch.linalg.vector_norm(t, dtype=torch.float64))))
            else:
                out.append(int(torch.sum(t, dtype=torch.int64)))
        else:
            out.append(repr(v))
    return out


@dataclasses.dataclass
class Truth:
    """One output's float64 ground truth of one round: all of it (``index`` None) or the places
    ``index`` (flat positions) of a larger output; kept on the host."""

    values: torch.Tensor  # float64, CPU, 1-D
    index: torch.Tensor | None  # int64, CPU


def keep_truth(out: torch.Tensor, gen: torch.Generator) -> Truth:
    flat = out.reshape(-1)
    n = flat.numel()
    if n <= SAMPLE_ELEMENTS:
        return Truth(flat.to("cpu", torch.float64).clone(), None)
    index = torch.randint(0, n, (SAMPLE_ELEMENTS,), generator=gen).sort().values
    return Truth(flat[index.to(flat.device)].to("cpu", torch.float64), index)


def _places(t: torch.Tensor, index: torch.Tensor | None) -> torch.Tensor:
    """``t``'s values at the flat places ``index`` (all of them for None), as float64 on the host;
    no whole-tensor copy of a strided view."""
    if index is None:
        return t.reshape(-1).to("cpu", torch.float64)
    coords = torch.unravel_index(index.to(t.device), tuple(t.shape))
    return t[coords].to("cpu", torch.float64)


def relative_errors(truth: Truth, ref: torch.Tensor, cand: torch.Tensor) -> tuple[float, float] | None:
    """(the reference's, the candidate's) relative L2 error against ``truth``, over the places
    where all three are finite; None where the ground truth is zero there (no relative error)."""
    g = truth.values
    r, c = _places(ref, truth.index), _places(cand, truth.index)
    finite = torch.isfinite(g) & torch.isfinite(r) & torch.isfinite(c)
    if not bool(finite.all()):
        g, r, c = g[finite], r[finite], c[finite]
    norm = float(torch.linalg.vector_norm(g))
    if not norm > 0 or not math.isfinite(norm):
        return None
    return float(torch.linalg.vector_norm(r - g)) / norm, float(torch.linalg.vector_norm(c - g)) / norm


# --- the gate ----------------------------------------------------------------------------------

def rms(values: Sequence[float]) -> float:
    return math.sqrt(sum(v * v for v in values) / len(values)) if values else 0.0


def ratio(cand_error: float, ref_error: float) -> float | None:
    """cand / ref; 1.0 when both are zero, None when only the reference's is."""
    if ref_error > 0:
        return cand_error / ref_error
    return 1.0 if cand_error == 0 else None


@dataclasses.dataclass
class Summary:
    """One output's errors over one group of rounds, and what the gate allows."""

    output: int
    dtype: torch.dtype
    numel: int
    group: str  # TASK or WIDENED
    rounds: int
    ref_error: float
    cand_error: float

    @property
    def k(self) -> float:
        return multiplier(self.dtype, self.numel)

    @property
    def floor(self) -> float:
        return floor_for(self.dtype)

    @property
    def allowed(self) -> float:
        return self.k * self.ref_error + self.floor

    @property
    def ok(self) -> bool:
        return self.cand_error <= self.allowed

    @property
    def ratio(self) -> float | None:
        return ratio(self.cand_error, self.ref_error)

    def excess(self) -> float:
        """How far past what is allowed (above 1: failed), for choosing the deciding summary."""
        return self.cand_error / self.allowed if self.allowed > 0 else (math.inf if self.cand_error > 0 else 0.0)

    def to_dict(self) -> dict[str, Any]:
        return {"output": self.output, "dtype": str(self.dtype).removeprefix("torch."), "group": self.group,
                "rounds": self.rounds, "ref_error": self.ref_error, "cand_error": self.cand_error,
                "ratio": self.ratio, "k": self.k, "floor": self.floor, "ok": self.ok}

    def describe(self) -> str:
        inputs = "the task's own inputs" if self.group == TASK else "widened inputs (random signs)"
        times = f"{self.ratio:.3g}x" if self.ratio is not None else "infinitely many times"
        out = f"output {self.output}, " if self.output else ""
        return (f"less precise than the reference: {times} its error against an fp64 ground truth ({out}relative "
                f"L2 error {self.cand_error:.3g} against the reference's {self.ref_error:.3g}, RMS over "
                f"{self.rounds} round(s) with {inputs}; allowed {self.k:g}x plus {self.floor:.2g} for "
                f"{str(self.dtype).removeprefix('torch.')})")


class PrecisionGate:
    """The gated rounds' ground truths, and the errors seen so far (``add`` per gated round)."""

    def __init__(self, truths: dict[int, tuple[list[Any], list[Truth | None]]], groups: dict[int, str],
                 out_struct: Sequence[tuple[tuple[int, ...], torch.dtype]], notes: list[str], where: str,
                 widened_inputs: tuple[int, ...]) -> None:
        self.truths = truths  # round -> (input fingerprint, per output Truth or None: not gated)
        self.groups = groups  # round -> TASK | WIDENED
        self.out_struct = list(out_struct)
        self.notes = list(notes)
        self.where = where  # the device the ground truth was computed on
        self.widened_inputs = widened_inputs
        self.errors: dict[tuple[int, str], list[tuple[float, float]]] = {}
        self.seen: set[int] = set()
        self.last = max(truths) if truths else -1

    def expects(self, r: int) -> bool:
        return r in self.truths and r not in self.seen

    def _round(self, r: int, inputs: Sequence[Any], ref: Sequence[torch.Tensor],
               cand: Sequence[torch.Tensor]) -> list[tuple[int, tuple[float, float]]]:
        prints, truths = self.truths[r]
        if fingerprint(inputs) != prints:
            self.notes.append(f"round {r} skipped: its inputs differ from those the ground truth was computed "
                              "from (the task's get_inputs does not repeat under the same seed)")
            return []
        out = []
        for i, truth in enumerate(truths):
            if truth is None:
                continue
            errs = relative_errors(truth, ref[i], cand[i])
            if errs is None:
                note = f"output {i}: rounds where its ground truth is zero are skipped (no relative error)"
                if note not in self.notes:
                    self.notes.append(note)
                continue
            out.append((i, errs))
        return out

    def _record(self, r: int, found: Sequence[tuple[int, tuple[float, float]]]) -> None:
        self.seen.add(r)
        for i, errs in found:
            self.errors.setdefault((i, self.groups[r]), []).append(errs)

    def add(self, r: int, inputs: Sequence[Any], ref: Sequence[torch.Tensor], cand: Sequence[torch.Tensor]) -> str:
        """Take gated round ``r``'s outputs; after the last gated round, the verdict: "" or why the
        candidate is less precise than the reference."""
        self._record(r, self._round(r, inputs, ref, cand))
        if r != self.last:
            return ""
        worst = self.deciding()
        return "" if worst is None or worst.ok else worst.describe()

    def describe_round(self, r: int, inputs: Sequence[Any], ref: Sequence[torch.Tensor],
                       cand: Sequence[torch.Tensor]) -> str:
        """For a gated round that failed the tolerance check: this round's own precision verdict
        ("" when it is within the gate, or the round is not gated); its errors join the evidence."""
        if r not in self.truths:
            return ""
        try:
            found = self._round(r, inputs, ref, cand)
        except Exception:  # noqa: BLE001 - only an addition to a verdict already reached
            return ""
        if r not in self.seen:  # the evidence shows the errors this verdict rests on
            self._record(r, found)
        for i, (e_ref, e_cand) in found:
            shape, dtype = self.out_struct[i]
            s = Summary(i, dtype, math.prod(shape), self.groups[r], 1, e_ref, e_cand)
            if not s.ok:
                return s.describe()
        return ""

    def summaries(self) -> list[Summary]:
        out = []
        for (i, group), errs in sorted(self.errors.items()):
            shape, dtype = self.out_struct[i]
            out.append(Summary(i, dtype, math.prod(shape), group, len(errs), rms([e[0] for e in errs]),
                               rms([e[1] for e in errs])))
        return out

    def deciding(self) -> Summary | None:
        """The summary closest to (or furthest past) what is allowed."""
        sums = self.summaries()
        return max(sums, key=lambda s: s.excess()) if sums else None

    def evidence(self) -> dict[str, Any]:
        worst = self.deciding()
        rounds = [r for r in self.seen if r in self.truths]
        base: dict[str, Any] = {
            "applied": True,
            "rounds": len(rounds),
            "widened_rounds": sum(self.groups[r] == WIDENED for r in rounds),
            "metric": METRIC,
            "ground_truth_device": self.where,
            "widened_inputs": list(self.widened_inputs),
        }
        if worst is None:
            base["note"] = ("no gated round checked yet" if not rounds else
                            "no gated round gave an error to compare")
        else:
            base.update({"ref_error": worst.ref_error, "cand_error": worst.cand_error, "ratio": worst.ratio,
                         "k": worst.k, "floor": worst.floor, "group": worst.group,
                         "outputs": [s.to_dict() for s in self.summaries()]})
        if self.notes:
            base["notes"] = list(self.notes)
        return base


def not_applied(note: str, notes: Sequence[str] = ()) -> dict[str, Any]:
    """The evidence of an evaluation without the gate."""
    out: dict[str, Any] = {"applied": False, "note": note}
    if notes:
        out["notes"] = list(notes)
    return out


# --- the set-up --------------------------------------------------------------------------------

def prepare(model: torch.nn.Module, source: Any, out_struct: Sequence[tuple[tuple[int, ...], torch.dtype]],
            device: torch.device, n_correct: int, rng: random.Random, flops: float | None,
            ) -> tuple[PrecisionGate | None, dict[str, Any]]:
    """The gate for one evaluation, or None and the evidence saying why there is none.

    ``model`` is the judge's own reference model, in the task's dtype on ``device``; it is
    converted to float64 in place (the judge does not use it afterwards). ``source`` is the
    evaluation's InputSource: widened rounds are registered on it (``source.widen``), so the
    rounds draw exactly the inputs the ground truth was computed from; without a gate, none."""
    try:
        gate, ev = _prepare(model, source, out_struct, device, n_correct, rng, flops)
    except BaseException:
        source.widen(WidenSpec(), [])
        raise
    if gate is None:
        source.widen(WidenSpec(), [])
    return gate, ev


def _prepare(model: torch.nn.Module, source: Any, out_struct: Sequence[tuple[tuple[int, ...], torch.dtype]],
             device: torch.device, n_correct: int, rng: random.Random, flops: float | None,
             ) -> tuple[PrecisionGate | None, dict[str, Any]]:
    dtypes = [d for _s, d in out_struct]
    gated = [gated_dtype(d) for d in dtypes]
    plain, widened = choose_rounds(n_correct, rng)
    notes: list[str] = []
    spec, spec_notes = widening_spec(source.inputs(-1))
    notes.extend(spec_notes)
    if widened and not spec:
        notes.append("no input widened (none looks like torch.rand: floating, non-negative, not integer-valued)")
        plain, widened = sorted(plain + widened), []
    if widened:
        source.widen(spec, widened)

        def call(inputs: list[Any]) -> Any:
            with torch.no_grad():
                return model(*inputs)

        for r in widened:
            why = widened_refusal(call, source.inputs(r), out_struct)
            if why:
                notes.append(f"widened inputs not used: {why} (round {r}); those rounds use the task's own inputs")
                source.widen(WidenSpec(), [])
                plain, widened = sorted(plain + widened), []
                break
    where = device
    gen = torch.Generator()
    gen.manual_seed(rng.getrandbits(63))
    truths: dict[int, tuple[list[Any], list[Truth | None]]] = {}
    rounds = sorted(plain + widened)
    try:
        model.to(torch.float64)
        truths = _truths(model, source, rounds, where, gen, gated)
    except NoGroundTruth as err:
        return None, not_applied(f"no float64 ground truth: {err}", notes)
    except Exception as err:  # noqa: BLE001 - no kernel for float64 on the device, or no room: try the host
        first = f"{type(err).__name__}: {str(err).strip().splitlines()[0][:200] if str(err).strip() else ''}"
        if device.type == "cpu":
            return None, not_applied(f"no float64 ground truth: the task failed in float64 ({first})", notes)
        _release(device)
        small, why = _cpu_fallback_allowed(flops, source, out_struct)
        if not small:
            return None, not_applied(f"no float64 ground truth: on {device} the task failed in float64 ({first}); "
                                     f"not tried on the CPU: {why}", notes)
        notes.append(f"ground truth computed on the CPU: on {device} the task failed in float64 ({first})")
        where = torch.device("cpu")
        try:
            model.to(where, torch.float64)
            truths = _truths(model, source, rounds, where, gen, gated)
        except NoGroundTruth as err:
            return None, not_applied(f"no float64 ground truth: {err}", notes)
        except Exception as err:  # noqa: BLE001
            return None, not_applied(f"no float64 ground truth: the task failed in float64 on the CPU too "
                                     f"({type(err).__name__}: {str(err)[:200]})", notes)
    finally:
        _release(device)
    for i, (_shape, d) in enumerate(out_struct):
        if not gated[i] and d.is_floating_point:
            notes.append(f"output {i} ({str(d).removeprefix('torch.')}) not gated: no higher-precision ground truth")
        elif not d.is_floating_point:
            notes.append(f"output {i} ({str(d).removeprefix('torch.')}) not gated: compared exactly")
    groups = {r: TASK for r in plain} | {r: WIDENED for r in widened}
    return PrecisionGate(truths, groups, out_struct, notes, str(where), spec.positions if widened else ()), {}


def _truths(model: torch.nn.Module, source: Any, rounds: Sequence[int], where: torch.device,
            gen: torch.Generator, gated: Sequence[bool]) -> dict[int, tuple[list[Any], list[Truth | None]]]:
    truths: dict[int, tuple[list[Any], list[Truth | None]]] = {}
    for r in rounds:
        inputs = [v.contiguous() if isinstance(v, torch.Tensor) else v for v in source.inputs(r)]
        prints = fingerprint(inputs)
        outs = float64_call(model, to_float64(inputs, where))
        if len(outs) != len(gated):
            raise NoGroundTruth("the float64 model returned another number of outputs")
        kept: list[Truth | None] = []
        for i, o in enumerate(outs):
            if not gated[i]:
                kept.append(None)
                continue
            if o.dtype != torch.float64:
                raise NoGroundTruth(f"output {i} is {o.dtype} when the task is cast up, not float64")
            kept.append(keep_truth(o, gen))
        truths[r] = (prints, kept)
        del outs, inputs
    return truths


def _cpu_fallback_allowed(flops: float | None, source: Any,
                          out_struct: Sequence[tuple[tuple[int, ...], torch.dtype]]) -> tuple[bool, str]:
    if flops is None:
        return False, "its FLOPs are not known"
    if flops > CPU_FALLBACK_MAX_FLOPS:
        return False, f"{flops:.3g} FLOPs per call (at most {CPU_FALLBACK_MAX_FLOPS:.0e})"
    sample = source.inputs(-1)
    n = sum(v.numel() for v in sample if isinstance(v, torch.Tensor)) + sum(math.prod(s) for s, _d in out_struct)
    if 8 * n > CPU_FALLBACK_MAX_BYTES:
        return False, f"{8 * n / 1e9:.1f} GB of float64 inputs and outputs"
    return True, ""


def _release(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
