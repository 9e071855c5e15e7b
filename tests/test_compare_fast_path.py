"""compare_tensor's finite-only fast path gives what the general path gives, field for field.

The fast path (evalfarm.compare._compare_finite) makes fewer passes over the data; whenever it
answers, its Comparison must equal the general path's for the same tensors, policy and chunking.
"""

from __future__ import annotations

import contextlib
import dataclasses
from unittest import mock

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalfarm import compare

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
SPECIALS = [0.0, -0.0, 1.0, -1.0, 1e-30, 3e38, -3e38, 65504.0, float("nan"), float("inf"), float("-inf")]


def _both(out: torch.Tensor, ref: torch.Tensor, policy: str, chunk: int):
    o, r = compare._flat(out), compare._flat(ref)
    return compare._compare_finite(o, r, ref, policy, chunk), compare._compare_general(o, r, ref, policy, chunk)


@st.composite
def pairs(draw):
    dtype = draw(st.sampled_from(DTYPES))
    n = draw(st.integers(1, 300))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    ref = (torch.randn(n, generator=g, dtype=torch.float64) * draw(st.sampled_from([1e-3, 1.0, 1e3]))).to(dtype)
    kind = draw(st.sampled_from(["noise", "scaled", "constant", "one_off", "specials", "same"]))
    out = ref.clone()
    if kind == "noise":
        eps = draw(st.sampled_from([1e-7, 1e-5, 1e-3, 1e-1]))
        out = (ref.double() + torch.randn(n, generator=g, dtype=torch.float64) * eps).to(dtype)
    elif kind == "scaled":
        out = (ref.double() * draw(st.sampled_from([0.999, 1.0001, 2.0]))).to(dtype)
    elif kind == "constant":
        out = torch.full_like(ref, draw(st.sampled_from([0.0, 1.0, -2.5])))
    elif kind == "one_off":
        out[draw(st.integers(0, n - 1))] += draw(st.sampled_from([1e-4, 1e-2, 1.0, 100.0]))
    elif kind == "specials":
        for _ in range(draw(st.integers(1, 3))):
            target = draw(st.sampled_from(["out", "ref", "both"]))
            i, v = draw(st.integers(0, n - 1)), draw(st.sampled_from(SPECIALS))
            if target in ("out", "both"):
                out[i] = v
            if target in ("ref", "both"):
                ref[i] = v
    shape = draw(st.sampled_from([(n,), (1, n), (n, 1)]))
    return out.reshape(shape), ref.reshape(shape)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pair=pairs(), policy=st.sampled_from(["strict", "kernelbench"]), chunk=st.sampled_from([1, 7, 64, 1 << 20]),
       short_rows=st.booleans())
def test_fast_path_equals_general_path(pair, policy, chunk, short_rows):
    out, ref = pair
    # short_rows: norms by rows of 5 from 4 elements, so the row path meets these lengths too
    rows = mock.patch.multiple(compare, NORM_ROW=5, NORM_FLOAT64_UP_TO=3) if short_rows else contextlib.nullcontext()
    with rows:
        fast, general = _both(out, ref, policy, chunk)
    if fast is not None:
        assert dataclasses.asdict(fast) == dataclasses.asdict(general), (fast, general)


@pytest.mark.parametrize("chunk", [16, 1 << 20])
@pytest.mark.parametrize("dtype", DTYPES)
def test_fast_path_answers_for_finite_outputs_and_declines_otherwise(dtype, chunk):
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(100, generator=g).to(dtype)
    out = (ref.double() * 1.5).to(dtype)  # wrong at every tolerance
    fast, general = _both(out, ref, "strict", chunk)
    assert fast is not None and not fast.ok and dataclasses.asdict(fast) == dataclasses.asdict(general)
    out[3] = float("nan")
    assert _both(out, ref, "strict", chunk)[0] is None  # NaN: the general path's NaN-pattern rules
    assert "NaN pattern" in compare.compare_tensor(out, ref, chunk_elements=chunk).reason


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pair=pairs(), chunk=st.sampled_from([1, 7, 64, 1 << 20]))
def test_skipping_the_elementwise_pass_changes_no_result(pair, chunk):
    # compare.ELEMENTWISE_SHORTCUT skips the strict policy's elementwise pass when the largest
    # difference is within the smallest bound; with and without it, every field is the same.
    out, ref = pair
    with_shortcut = compare.compare_tensor(out, ref, "strict", chunk_elements=chunk)
    compare.ELEMENTWISE_SHORTCUT = False
    try:
        without = compare.compare_tensor(out, ref, "strict", chunk_elements=chunk)
    finally:
        compare.ELEMENTWISE_SHORTCUT = True
    assert dataclasses.asdict(with_shortcut) == dataclasses.asdict(without), (with_shortcut, without)


def test_the_shortcut_is_taken_for_close_outputs_and_not_at_the_bound():
    n = 100_000
    g = torch.Generator().manual_seed(1)
    ref = torch.randn(n, generator=g)
    rtol, atol_frac = compare.STRICT_TOLERANCES[torch.float32][1:]
    atol = atol_frac * float(ref.norm()) / n ** 0.5
    calls = []
    original = compare._judged

    def spy(errors, ref_, policy, n_counted, pieces):
        def counted():
            calls.append("elementwise pass")
            yield from pieces()
        return original(errors, ref_, policy, n_counted, counted)

    compare._judged = spy
    try:
        close = ref + 1e-7 * torch.randn(n, generator=g)
        assert compare.compare_tensor(close, ref).ok and calls == []  # within atol everywhere: skipped
        # Beyond atol at the largest |ref|, but within rtol * |ref| + atol there: the pass runs, passes.
        big, small = int(ref.abs().argmax()), int(ref.abs().argmin())
        assert rtol * abs(float(ref[big])) > atol  # the element's own bound is wider than atol
        near = ref.clone()
        near[big] += 2 * atol
        assert compare.compare_tensor(near, ref).ok and calls == ["elementwise pass"]
        # Beyond its own bound at the smallest |ref| (relative L2 error still within its limit):
        # the pass runs and names it.
        far = ref.clone()
        far[small] += 10 * atol
        c = compare.compare_tensor(far, ref)
        assert not c.ok and c.worst_index == [small] and "element" in c.reason, c
        assert calls == ["elementwise pass"] * 2
    finally:
        compare._judged = original
