"""The comparison's device work queued ahead (compare.queued_check / compare.passed) against compare_tensor."""

from __future__ import annotations

import contextlib
from unittest import mock

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from evalfarm import compare
from evalfarm.compare import compare_tensor, passed, queued_check

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.bool]


def look(out: torch.Tensor, ref: torch.Tensor, policy: str = "strict"):
    q = queued_check(out, ref, policy)
    return None if q is None else passed(q.tolist(), ref)


def check_agrees(out: torch.Tensor, ref: torch.Tensor, policy: str = "strict") -> bool:
    """Where the look decides, it is compare_tensor's answer, numbers and all; a failing pair is never
    passed. Returns whether the look decided."""
    full = compare_tensor(out, ref, policy)
    got = look(out, ref, policy)
    if got is not None:
        assert got.to_dict() == full.to_dict()
    if not full.ok:
        assert got is None
    return got is not None


@settings(max_examples=300, deadline=None)
@given(dtype=st.sampled_from(DTYPES), rows=st.integers(1, 9), cols=st.integers(1, 33), seed=st.integers(0, 2**31),
       change=st.sampled_from(["none", "tiny", "small", "large", "nan", "inf", "const", "zero_ref", "both_nan"]),
       transpose=st.booleans(), short_rows=st.booleans())
def test_the_look_agrees_with_the_full_comparison(dtype, rows, cols, seed, change, transpose, short_rows):
    # short_rows: norms by rows of 4 from 3 elements, so the row path meets these sizes too
    with mock.patch.multiple(compare, NORM_ROW=4, NORM_FLOAT64_UP_TO=2) if short_rows else contextlib.nullcontext():
        _look_agrees(dtype, rows, cols, seed, change, transpose)


def _look_agrees(dtype, rows, cols, seed, change, transpose):
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(rows, cols, generator=g, dtype=torch.float64)
    ref = (base * 100).to(dtype) if not dtype.is_floating_point else base.to(dtype)
    out = ref.clone()
    if dtype.is_floating_point and out.numel():
        i, j = int(torch.randint(rows, (), generator=g)), int(torch.randint(cols, (), generator=g))
        if change == "tiny":
            out[i, j] = out[i, j] * (1 + 1e-7) + 1e-9
        elif change == "small":
            out[i, j] += 1e-3 * float(ref.abs().max())
        elif change == "large":
            out[i, j] += 1.0
        elif change == "nan":
            out[i, j] = float("nan")
        elif change == "inf":
            out[i, j] = float("inf")
        elif change == "const":
            out.fill_(0.25)
        elif change == "zero_ref":
            ref = torch.zeros_like(ref)
        elif change == "both_nan":
            ref[i, j] = out[i, j] = float("nan")
    elif change in ("large", "small") and out.numel():
        out.view(-1)[0] = ~out.view(-1)[0] if dtype == torch.bool else out.view(-1)[0] + 1
    if transpose:  # strided views, as a worker's own layout comes back
        out, ref = out.t().contiguous().t(), ref.t().contiguous().t()
    check_agrees(out, ref)
    check_agrees(out, ref, "kernelbench")


def test_the_look_decides_the_common_cases():
    ref = torch.randn(64, 48, dtype=torch.float32, generator=torch.Generator().manual_seed(1))
    assert check_agrees(ref.clone(), ref)  # equal
    near = ref.clone()
    near[3, 4] = torch.nextafter(near[3, 4], torch.tensor(10.0))
    assert check_agrees(near, ref) and look(near, ref).max_abs_error > 0  # last-bit differences: passes
    far = ref.clone()
    far[0, 0] += 1.0
    assert not check_agrees(far, ref)  # fails: left to the full comparison
    assert look(ref.clone(), ref, "kernelbench") is None  # KernelBench's allclose: the full comparison
    assert queued_check(ref.to(torch.complex64), ref.to(torch.complex64)) is None
    assert queued_check(ref[:1, :1], ref[:1, :1]) is None  # a single element


@pytest.mark.gpu
def test_on_a_gpu_the_look_agrees_too():
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU")
    g = torch.Generator().manual_seed(2)
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        ref = torch.randn(256, 333, generator=g).to(dtype).cuda()
        for scale in (0.0, 1e-7, 1e-4, 1e-1):
            out = ref + (scale * torch.randn(ref.shape, generator=g)).to(dtype).cuda()
            check_agrees(out, ref)
            check_agrees(out.t().contiguous().t(), ref)
