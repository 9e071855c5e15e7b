"""A batch's audits: one look at all of its rounds (RoundAudit.identical), the full check for the rest."""

from __future__ import annotations

import random

import pytest
import torch

from evalfarm.compare import compare_outputs
from evalfarm.judge.arena import Arena
from evalfarm.judge.audits import IDENTICAL_MAX_ELEMENTS, RoundAudit
from evalfarm.judge.roles import CANDIDATE, REFERENCE
from evalfarm.judge.rounds import Call, RoundPlan


class Batch:
    """Arenas holding rounds whose outputs and inputs a test sets by hand."""

    def __init__(self, shapes: list[tuple[int, ...]], tuple_out: bool = False, ref_mutates_inputs: bool = False,
                 device: str = "cpu") -> None:
        self.arenas = {(role, kind): Arena.allocate(1 << 22, device) for role in (REFERENCE, CANDIDATE)
                       for kind in ("in", "out")}
        self.shapes, self.device = shapes, torch.device(device)
        self.audit = RoundAudit(self.arenas, tuple_out, "strict", ref_mutates_inputs, self.device)
        self.gen = torch.Generator().manual_seed(0)

    def round(self, r: int) -> RoundPlan:
        x = torch.rand(8, 16, generator=self.gen).to(self.device)
        calls = {}
        for role in (REFERENCE, CANDIDATE):
            in_slot = self.arenas[role, "in"].alloc(tuple(x.shape), x.dtype)
            self.arenas[role, "in"].view(in_slot).copy_(x)
            outs = [self.arenas[role, "out"].alloc(s, torch.float32) for s in self.shapes]
            calls[role] = Call([in_slot, None], outs, {})
        plan = RoundPlan(r, REFERENCE, True, [x, 3], calls)
        plan.times = {role: {"strides": None} for role in (REFERENCE, CANDIDATE)}
        for k, shape in enumerate(self.shapes):  # both workers wrote the same output
            value = torch.rand(shape, generator=self.gen).to(self.device)
            for role in (REFERENCE, CANDIDATE):
                self.arenas[role, "out"].view(calls[role].out_slots[k]).copy_(value)
        return plan

    def cand_out(self, plan: RoundPlan, k: int = 0) -> torch.Tensor:
        return self.arenas[CANDIDATE, "out"].view(plan.calls[CANDIDATE].out_slots[k])

    def cand_in(self, plan: RoundPlan) -> torch.Tensor:
        return self.arenas[CANDIDATE, "in"].view(plan.calls[CANDIDATE].in_slots[0])

    def close(self) -> None:
        for a in self.arenas.values():
            a.close()


@pytest.fixture
def batch():
    b = Batch([(8, 4)])
    yield b
    b.close()


def test_equal_rounds_are_found_and_every_other_one_is_left_to_the_full_check(batch):
    plans = [batch.round(r) for r in range(6)]
    batch.cand_out(plans[1])[3, 2] += 1e-6  # off, and within tolerance: OK, but not identical
    batch.cand_out(plans[2])[0, 0] = float("nan")  # wrong
    batch.cand_in(plans[3])[1, 1] = -1.0  # its input written into
    for role in (REFERENCE, CANDIDATE):  # equal NaNs: torch.equal says unequal, so does the shortcut
        batch.arenas[role, "out"].view(plans[4].calls[role].out_slots[0])[2, 2] = float("nan")
    assert batch.audit.identical(plans) == {0, 5}
    for plan in plans:  # what the full check finds agrees wherever the shortcut claims a round
        full = batch.audit.compare(plan)
        if plan.r in {0, 5}:
            assert full.ok and full.rel_l2_error == 0 and not batch.audit.input_modified(plan)
    assert batch.audit.compare(plans[1]).ok and not batch.audit.compare(plans[2]).ok
    assert batch.audit.input_modified(plans[3])


def test_tuple_outputs_need_every_tensor_equal():
    b = Batch([(4, 4), (2, 3)], tuple_out=True)
    try:
        plans = [b.round(r) for r in range(3)]
        b.cand_out(plans[1], k=1)[1, 2] += 1.0
        assert b.audit.identical(plans) == {0, 2}
        assert compare_outputs(b.audit.outputs(plans[0], CANDIDATE), b.audit.outputs(plans[0], REFERENCE)).output_index == 1
    finally:
        b.close()


def test_a_reference_that_writes_its_inputs_lets_the_candidate_write_them_too():
    b = Batch([(8, 4)], ref_mutates_inputs=True)
    try:
        plan = b.round(0)
        b.cand_in(plan).zero_()
        assert b.audit.identical([plan]) == {0} and not b.audit.input_modified(plan)
    finally:
        b.close()


def test_a_reported_layout_that_does_not_fit_or_a_large_tensor_is_left_out(batch, monkeypatch):
    plan = batch.round(0)
    plan.times[CANDIDATE]["strides"] = [[1, 1000]]  # beyond its slot: compare() raises HACK_DETECTED
    assert batch.audit.identical([plan]) == set()
    plan.times[CANDIDATE]["strides"] = None
    assert batch.audit.identical([plan]) == {0}
    monkeypatch.setattr("evalfarm.judge.audits.IDENTICAL_MAX_ELEMENTS", 16)
    assert batch.audit.identical([plan]) == set()
    assert IDENTICAL_MAX_ELEMENTS >= 1 << 20 and batch.audit.identical([]) == set()


def test_randomised_rounds_agree_with_the_full_check(batch):
    rng = random.Random(3)
    plans = [batch.round(r) for r in range(40)]
    for plan in plans:
        change = rng.random()
        if change < 0.3:
            batch.cand_out(plan)[rng.randrange(8), rng.randrange(4)] += rng.choice([1e-7, 1e-2, 5.0])
        elif change < 0.4:
            batch.cand_in(plan)[rng.randrange(8), rng.randrange(16)] += 1.0
    same = batch.audit.identical(plans)
    for plan in plans:
        exact = torch.equal(batch.cand_out(plan), batch.arenas[REFERENCE, "out"].view(plan.calls[REFERENCE].out_slots[0]))
        assert (plan.r in same) == (exact and not batch.audit.input_modified(plan))


@pytest.mark.gpu
def test_on_a_gpu_equal_rounds_are_found_as_on_a_cpu():
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU")
    b = Batch([(64, 32)], device="cuda:0")
    try:
        plans = [b.round(r) for r in range(8)]
        b.cand_out(plans[5])[0, 0] += 1.0
        assert b.audit.identical(plans) == {0, 1, 2, 3, 4, 6, 7}
    finally:
        b.close()
