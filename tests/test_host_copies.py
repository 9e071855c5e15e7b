"""The judge's host copies of a timed batch's inputs (timed_blocks.host_copies): the values the
planner drew, on the host; from a GPU, page-locked."""

from __future__ import annotations

import pytest
import torch

from evalfarm.judge.rounds import RoundPlan
from evalfarm.judge.timed_blocks import host_copies


def _plans(device: str) -> list[RoundPlan]:
    gen = torch.Generator(device=device).manual_seed(7)
    return [RoundPlan(r, "reference", False, [torch.randn(64, 33, device=device, generator=gen), 3,
                                              torch.arange(5, device=device)], {})
            for r in range(3)]


def _check(plans: list[RoundPlan], copies: list[list]) -> None:
    assert len(copies) == len(plans)
    for plan, row in zip(plans, copies, strict=True):
        assert row[1] == 3
        for v, c in ((plan.inputs[0], row[0]), (plan.inputs[2], row[2])):
            assert c.device.type == "cpu" and c.dtype == v.dtype and c.shape == v.shape
            assert torch.equal(c, v.cpu())


def test_host_copies_on_a_cpu_are_the_inputs():
    plans = _plans("cpu")
    _check(plans, host_copies(plans, torch.device("cpu")))


@pytest.mark.gpu
def test_host_copies_from_a_gpu_are_page_locked_and_equal():
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    plans = _plans("cuda")
    copies = host_copies(plans, torch.device("cuda"))
    _check(plans, copies)
    assert all(row[0].is_pinned() and row[2].is_pinned() for row in copies)
