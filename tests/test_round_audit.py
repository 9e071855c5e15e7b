"""A batch's audits: one look at all of its rounds (RoundAudit.prechecked), the full check for the rest."""

from __future__ import annotations

import random

import pytest
import torch

from evalfarm.compare import CHUNK_ELEMENTS
from evalfarm.judge.arena import Arena
from evalfarm.judge.audits import RoundAudit
from evalfarm.judge.roles import CANDIDATE, REFERENCE
from evalfarm.judge.rounds import Call, RoundPlan


class Batch:
    """Arenas holding rounds whose outputs and inputs a test sets by hand."""

    def __init__(self, shapes: list[tuple[int, ...]], tuple_out: bool = False, ref_mutates_inputs: bool = False,
                 device: str = "cpu") -> None:
        self.arenas = {(role, kind): Arena.allocate(1 << 22, device) for role in (REFERENCE, CANDIDATE)
                       for kind in ("in", "out")}
        self.shapes, self.device = shapes, torch.device(device)
        self.audit = RoundAudit(self.arenas, tuple_out, "strict", ref_mutates_inputs)
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


def agrees(batch: Batch, plans: list[RoundPlan]) -> set[int]:
    """The rounds prechecked, after asserting that each got exactly what the full check returns."""
    found = batch.audit.prechecked(plans)
    for plan in plans:
        if plan.r in found:
            full = batch.audit.compare(plan)
            assert full.ok and found[plan.r].to_dict() == full.to_dict()
            assert not batch.audit.input_modified(plan)
    return set(found)


def test_passing_rounds_are_found_with_the_full_checks_numbers_and_the_others_left_to_it(batch):
    plans = [batch.round(r) for r in range(7)]
    batch.cand_out(plans[1])[3, 2] += 1e-6  # off, and within tolerance: passes by the shortcut
    batch.cand_out(plans[2])[0, 0] = float("nan")  # wrong
    batch.cand_in(plans[3])[1, 1] = -1.0  # its input written into
    for role in (REFERENCE, CANDIDATE):  # equal NaNs: torch.equal says unequal; the full check decides
        batch.arenas[role, "out"].view(plans[4].calls[role].out_slots[0])[2, 2] = float("nan")
    batch.cand_out(plans[5])[0, 1] += 1e-3  # off beyond the relative L2 bound: fails
    assert agrees(batch, plans) == {0, 1, 6}
    assert batch.audit.prechecked(plans)[1].max_abs_error > 0
    assert batch.audit.compare(plans[4]).ok  # the full check passes it: the look only left it out
    assert not batch.audit.compare(plans[2]).ok and not batch.audit.compare(plans[5]).ok
    assert batch.audit.input_modified(plans[3])


def test_tuple_outputs_need_every_tensor_to_pass_and_the_worst_is_reported_as_the_full_check_picks_it():
    b = Batch([(4, 4), (2, 3)], tuple_out=True)
    try:
        plans = [b.round(r) for r in range(4)]
        b.cand_out(plans[1], k=1)[1, 2] += 1.0
        b.cand_out(plans[2], k=0)[1, 2] += 1e-6
        assert agrees(b, plans) == {0, 2, 3}
        assert b.audit.prechecked(plans)[0].output_index == 1 and b.audit.prechecked(plans)[2].output_index == 0
    finally:
        b.close()


def test_a_reference_that_writes_its_inputs_lets_the_candidate_write_them_too():
    b = Batch([(8, 4)], ref_mutates_inputs=True)
    try:
        plan = b.round(0)
        b.cand_in(plan).zero_()
        assert agrees(b, [plan]) == {0}
    finally:
        b.close()


def test_a_reported_layout_that_does_not_fit_or_a_large_tensor_is_left_to_the_full_check(batch, monkeypatch):
    plan = batch.round(0)
    plan.times[CANDIDATE]["strides"] = [[1, 1000]]  # beyond its slot: compare() raises HACK_DETECTED
    assert batch.audit.prechecked([plan]) == {}
    plan.times[CANDIDATE]["strides"] = [[1, 8]]  # a column-major layout of its own: fine
    batch.arenas[CANDIDATE, "out"].strided_view(plan.calls[CANDIDATE].out_slots[0], [1, 8]).copy_(
        batch.arenas[REFERENCE, "out"].view(plan.calls[REFERENCE].out_slots[0]))
    assert agrees(batch, [plan]) == {0}
    monkeypatch.setattr("evalfarm.compare.CHUNK_ELEMENTS", 16)
    assert batch.audit.prechecked([plan]) == {}
    assert CHUNK_ELEMENTS >= 1 << 20 and batch.audit.prechecked([]) == {}


def test_randomised_rounds_agree_with_the_full_check(batch):
    rng = random.Random(3)
    plans = [batch.round(r) for r in range(60)]
    for plan in plans:
        change = rng.random()
        if change < 0.4:
            batch.cand_out(plan)[rng.randrange(8), rng.randrange(4)] += rng.choice([1e-8, 1e-6, 1e-4, 1e-2, 5.0])
        elif change < 0.5:
            batch.cand_in(plan)[rng.randrange(8), rng.randrange(16)] += 1.0
        elif change < 0.55:
            batch.cand_out(plan).fill_(0.5)  # a constant
    found = agrees(batch, plans)
    for plan in plans:  # every round left out fails the full check, or is one the look cannot judge
        if plan.r not in found:
            full = batch.audit.compare(plan)
            assert not full.ok or batch.audit.input_modified(plan) or full.max_abs_error > 0


@pytest.mark.gpu
def test_on_a_gpu_passing_rounds_are_found_as_on_a_cpu():
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU")
    b = Batch([(64, 32)], device="cuda:0")
    try:
        plans = [b.round(r) for r in range(8)]
        b.cand_out(plans[5])[0, 0] += 1.0
        b.cand_out(plans[6])[0, 0] += 1e-6
        assert agrees(b, plans) == {0, 1, 2, 3, 4, 6, 7}
    finally:
        b.close()
