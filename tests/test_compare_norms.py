"""The comparison's norms (evalfarm.compare._rows_norm, _norms): float32 rows summed in float64,
close to an exact float64 norm, without a float64 copy of the data, and computed again in float64
where float32 squares would underflow or overflow."""

from __future__ import annotations

import math

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from evalfarm import compare
from evalfarm.compare import compare_tensor, passed, queued_check


def exact(x: torch.Tensor) -> float:
    return math.sqrt(float((x.double() ** 2).sum()))


@pytest.mark.parametrize("n", [4097, 100_003, 1 << 20])
@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e6])
def test_rows_norm_is_within_a_float32_rounding_of_the_exact_norm(n, scale):
    x = torch.randn(n, generator=torch.Generator().manual_seed(n)) * scale
    got = float(compare._rows_norm(x))
    assert got == pytest.approx(exact(x), rel=1e-6)
    assert compare._norm_trusted(got, x)


def test_short_and_float64_data_keep_the_exact_float64_norm():
    short = torch.randn(compare.NORM_FLOAT64_UP_TO, generator=torch.Generator().manual_seed(1))
    assert float(compare._rows_norm(short)) == float(torch.linalg.vector_norm(short, dtype=torch.float64))
    wide = torch.randn(50_000, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    assert float(compare._rows_norm(wide)) == float(torch.linalg.vector_norm(wide))


def test_rows_norm_writes_no_float64_copy_of_the_data():
    n = 1 << 22  # 16 MiB of float32: a float64 copy would be 32 MiB
    x = torch.randn(n)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        compare._rows_norm(x)
    largest = max((e.cpu_memory_usage for e in prof.events() if e.cpu_memory_usage > 0), default=0)
    assert largest < n  # bytes: at most a row norm per row, never a copy of the data
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        torch.linalg.vector_norm(x, dtype=torch.float64)  # what it replaces, for contrast
    assert max(e.cpu_memory_usage for e in prof.events()) >= 8 * n


@pytest.mark.parametrize("scale", [1e-25, 1e-21])
def test_a_tiny_reference_is_normed_in_float64_and_a_wrong_output_still_fails(scale):
    g = torch.Generator().manual_seed(3)
    ref = torch.randn(20_000, generator=g) * scale  # squares underflow in float32
    fast = float(compare._rows_norm(ref))
    assert not compare._norm_trusted(fast, ref)
    ref_norm, err_norm = compare._norms(ref, torch.zeros_like(ref))
    assert ref_norm == pytest.approx(exact(ref), rel=1e-12) and err_norm == 0.0
    wrong = compare_tensor(ref * 2, ref)
    assert not wrong.ok and wrong.rel_l2_error == pytest.approx(1.0, rel=1e-6)
    near = ref * (1 + 1e-7)
    assert compare_tensor(near, ref).ok
    q = queued_check(near, ref)
    got = None if q is None else passed(q.tolist(), ref)
    assert got is None or got.to_dict() == compare_tensor(near, ref).to_dict()
    q = queued_check(ref * 2, ref)
    assert q is not None and passed(q.tolist(), ref) is None  # the look leaves it to the full comparison


def test_an_overflowing_float32_norm_is_computed_again_in_float64():
    ref = torch.full((10_000,), 3e19) * torch.linspace(0.5, 1.5, 10_000)  # squares overflow float32
    assert not math.isfinite(float(compare._rows_norm(ref)))
    ref_norm, _ = compare._norms(ref, torch.zeros_like(ref))
    assert ref_norm == pytest.approx(exact(ref), rel=1e-12)
    out = ref * (1 + 1e-6)
    c = compare_tensor(out, ref)
    assert c.ok and c.rel_l2_error == pytest.approx(exact(out - ref) / exact(ref), rel=1e-9)
    assert not compare_tensor(ref * 1.01, ref).ok


@pytest.mark.parametrize("noise", [0.0, 1e-7, 1e-5, 1e-3])
def test_look_and_full_comparison_agree_at_output_sizes(noise):
    g = torch.Generator().manual_seed(4)
    ref = torch.randn(300, 700, generator=g)
    out = ref + noise * torch.randn(ref.shape, generator=g)
    full = compare_tensor(out, ref)
    q = queued_check(out, ref)
    assert q is not None
    got = passed(q.tolist(), ref)
    assert full.ok == (noise < 1e-3)
    if full.ok:
        assert got is not None and got.to_dict() == full.to_dict()
        assert full.rel_l2_error == pytest.approx(exact(out - ref) / exact(ref), rel=1e-5, abs=1e-30)
    else:
        assert got is None
