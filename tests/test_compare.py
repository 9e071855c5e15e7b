"""The output comparison: structure, NaN/Inf patterns, dtype- and scale-aware tolerance."""

from __future__ import annotations

import pytest
import torch

from evalfarm.compare import compare_outputs, compare_tensor


@pytest.fixture(autouse=True)
def _seeded() -> None:
    torch.manual_seed(0)  # every assertion below holds for any draw; a fixed one keeps failures reproducible


def test_float32_rounding_noise_passes_and_reports_error():
    r = torch.randn(256, 256)
    c = compare_outputs(r + 1e-7 * torch.randn_like(r), r)
    assert c.ok and 0 < c.rel_l2_error < 1e-5


def test_half_precision_downgrade_fails_strict_but_passes_kernelbench():
    r = torch.randn(256, 256)
    downgraded = r.half().float()
    assert not compare_outputs(downgraded, r).ok
    assert compare_outputs(downgraded, r, "kernelbench").ok


def test_one_bad_element_fails_elementwise_and_names_it():
    r = torch.randn(1000, 100)
    o = r.clone()
    o[123, 45] += 0.05
    c = compare_outputs(o, r)
    assert not c.ok and c.worst_index == [123, 45] and "[123, 45]" in c.reason


def test_constant_output_fails_on_tiny_outputs():
    r = 1e-4 * torch.randn(4096)
    # allclose(atol=1e-2) alone is fooled by zeros here; the constant-output check is not.
    assert torch.allclose(torch.zeros_like(r), r, atol=1e-2, rtol=1e-2)
    for policy in ("strict", "kernelbench"):
        c = compare_outputs(torch.zeros_like(r), r, policy)
        assert not c.ok
        assert c.reason.startswith("output is constant (all 0.0) while the reference varies"), c.reason


def test_nonzero_constant_output_is_rejected_under_both_policies():
    r = 1e-4 * torch.randn(64, 64, generator=torch.Generator().manual_seed(0)) + 3e-4
    const = torch.full_like(r, float(r.mean()))
    for policy in ("strict", "kernelbench"):
        c = compare_outputs(const, r, policy)
        assert not c.ok, policy
        assert c.reason.startswith(f"output is constant (all {float(r.mean()):.6g})"), c.reason
        assert "while the reference varies" in c.reason


def test_constant_output_is_fine_when_the_reference_is_constant_too():
    for policy in ("strict", "kernelbench"):
        assert compare_outputs(torch.zeros(100), torch.zeros(100), policy).ok
        assert compare_outputs(torch.ones(100), torch.ones(100), policy).ok
        # a reference that is constant up to rounding noise may be matched by an exact constant
        r = torch.full((100,), 0.25) + 1e-9 * torch.randn(100, generator=torch.Generator().manual_seed(1))
        assert compare_outputs(torch.full((100,), 0.25), r, policy).ok
        # a single element is never "constant" output
        assert compare_outputs(torch.zeros(1), torch.full((1,), 1e-4), "kernelbench").ok


def test_constant_output_check_covers_half_precision():
    r = (1e-3 * torch.randn(512)).half()
    c = compare_outputs(torch.zeros_like(r), r, "kernelbench")
    assert not c.ok and "constant" in c.reason


def test_nan_and_inf_patterns_must_match():
    r = torch.randn(10)
    r[3] = float("nan")
    r[5] = float("inf")
    same = r.clone()
    assert compare_outputs(same, r).ok
    moved = r.clone()
    moved[3], moved[4] = 0.0, float("nan")
    assert "NaN pattern" in compare_outputs(moved, r).reason
    flipped = r.clone()
    flipped[5] = -float("inf")
    assert "Inf pattern" in compare_outputs(flipped, r).reason


def test_structure_type_shape_dtype_and_tuples():
    r = torch.randn(4, 4)
    assert "shape" in compare_outputs(torch.randn(4, 5), r).reason
    assert "dtype" in compare_outputs(r.double(), r).reason
    assert "exactly torch.Tensor" in compare_outputs(torch.nn.Parameter(r), r).reason
    assert "structure" in compare_outputs((r, r), r).reason
    assert compare_outputs((r, r.clone()), (r, r)).ok
    assert not compare_outputs((r, r + 1), (r, r)).ok


def test_integer_outputs_are_exact():
    r = torch.arange(10)
    assert compare_outputs(r.clone(), r).ok
    o = r.clone()
    o[7] += 1
    c = compare_outputs(o, r)
    assert not c.ok and c.worst_index == [7]


@pytest.mark.parametrize("policy", ["strict", "kernelbench"])
def test_chunked_comparison_matches_the_whole_tensor_one(policy):
    """Small chunks (many of them) give the same verdict, reason and errors as one chunk."""
    from evalfarm.compare import compare_tensor

    r = torch.randn(37, 53)
    cases = {
        "noise": r + 1e-7 * torch.randn_like(r),
        "one bad element": r.clone().index_put_((torch.tensor([30]), torch.tensor([7])), torch.tensor(9.0)),
        "half": r.half().float(),
        "zeros": torch.zeros_like(r),
        "two equal worst": r.clone().index_put_((torch.tensor([2, 20]), torch.tensor([3, 3])), torch.tensor(5.0)),
    }
    r_nan = r.clone()
    r_nan[1, 1], r_nan[20, 5] = float("nan"), float("inf")
    for name, o in cases.items():
        whole = compare_tensor(o, r, policy, chunk_elements=r.numel())
        chunked = compare_tensor(o, r, policy, chunk_elements=7)
        assert (whole.ok, whole.reason, whole.worst_index) == (chunked.ok, chunked.reason, chunked.worst_index), name
        assert chunked.rel_l2_error == pytest.approx(whole.rel_l2_error, rel=1e-9), name
        o_nan = o.clone()
        o_nan[1, 1], o_nan[20, 5] = float("nan"), float("inf")
        w, c = (compare_tensor(o_nan, r_nan, policy, chunk_elements=k) for k in (r.numel(), 5))
        assert (w.ok, w.reason, w.worst_index) == (c.ok, c.reason, c.worst_index), name


def test_nan_and_inf_places_found_across_chunks():
    from evalfarm.compare import compare_tensor

    r = torch.randn(100)
    r[90] = float("nan")
    o = r.clone()
    o[90], o[95] = 1.0, float("nan")
    c = compare_tensor(o, r, chunk_elements=8)
    assert not c.ok and c.worst_index == [90] and "NaN pattern" in c.reason


def test_comparison_allocates_no_whole_output_float64_copy():
    """No tensor the comparison creates is larger than a chunk's worth (views of the inputs aside)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from evalfarm.compare import compare_tensor

    class LargestNewTensor(TorchDispatchMode):
        def __init__(self, known: list[torch.Tensor]) -> None:
            super().__init__()
            self.known = {t.untyped_storage().data_ptr() for t in known}
            self.largest = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            result = func(*args, **(kwargs or {}))
            for t in result if isinstance(result, tuple | list) else [result]:
                if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in self.known:
                    self.largest = max(self.largest, t.untyped_storage().nbytes())
            return result

    r = torch.randn(1 << 20)  # 4 MiB of float32
    for o in (r + 1e-7 * torch.randn_like(r), torch.zeros_like(r), r.clone().index_fill_(0, torch.tensor([5]), 3.0)):
        for chunk, bound in ((1 << 14, 1 << 18), (1 << 20, 4 << 20)):
            with LargestNewTensor([o, r]) as mode:
                compare_tensor(o, r, chunk_elements=chunk)
            assert 0 < mode.largest <= bound, (chunk, mode.largest)


def test_a_constant_beside_the_references_nans_fails_under_both_policies():
    # NaN where the reference has NaN and zeros elsewhere: the NaN places match, the rest is a
    # constant standing in for a varying reference (was OK under kernelbench: allclose with
    # atol=1e-2 passes small reference values).
    ref = torch.randn(4096) * 1e-3
    ref[::7] = float("nan")
    out = torch.zeros_like(ref)
    out[::7] = float("nan")
    for policy in ("strict", "kernelbench"):
        c = compare_tensor(out, ref, policy)
        assert not c.ok and "constant" in c.reason, (policy, c.reason)


def test_an_honest_output_with_the_references_nans_passes_under_both_policies():
    ref = torch.randn(4096)
    ref[::5] = float("nan")
    out = ref.clone()
    out[1::5] += 1e-7
    for policy in ("strict", "kernelbench"):
        assert compare_tensor(out, ref, policy).ok, policy
