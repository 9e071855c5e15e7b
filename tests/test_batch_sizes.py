"""How many rounds a batch holds: the arena budget by device, and the cap on a timed batch."""

from __future__ import annotations

import random

import pytest
import torch

from evalfarm.judge.exchange import ARENA_BUDGET_ENV, Switches, arena_budget_bytes
from evalfarm.judge.setup import (
    ARENA_BUDGET_CPU_BYTES,
    ARENA_BUDGET_CUDA_BOUNDS,
    TIMED_BATCH_HOST_BYTES,
    arena_budget,
    timed_rounds_per_batch,
)
from evalfarm.judge.timed_blocks import MIN_BLOCK_CALLS
from evalfarm.scoring import as_task

GiB = 1 << 30


def test_the_gpu_budget_is_a_share_of_the_device_within_bounds():
    low, high = ARENA_BUDGET_CUDA_BOUNDS
    assert arena_budget("cuda", 16 * GiB) == low  # a small card: the lower bound
    assert arena_budget("cuda", 80 * GiB) == 5 * GiB  # an H100: a sixteenth
    assert arena_budget("cuda", 141 * 10**9) == high  # an H200: the upper bound
    assert arena_budget("cpu", 512 * GiB) == ARENA_BUDGET_CPU_BYTES  # host memory is not the device's


def test_the_operator_sets_the_budget_in_mib_and_a_bad_value_is_refused(monkeypatch):
    monkeypatch.delenv(ARENA_BUDGET_ENV, raising=False)
    assert Switches.from_env("cuda").arena_budget_bytes == 0  # unset: the default
    monkeypatch.setenv(ARENA_BUDGET_ENV, "3072")
    override = Switches.from_env("cuda").arena_budget_bytes
    assert override == 3 * GiB
    assert arena_budget("cuda", 80 * GiB, override) == 3 * GiB and arena_budget("cpu", 0, override) == 3 * GiB
    for bad in ("0", "-5", "1.5", "lots"):
        monkeypatch.setenv(ARENA_BUDGET_ENV, bad)
        with pytest.raises(ValueError, match=ARENA_BUDGET_ENV):
            Switches.from_env("cuda")
    assert arena_budget_bytes(" ") == 0


def test_a_timed_batch_holds_at_most_its_host_bytes_and_at_least_the_fewest_block_calls():
    small = 1 << 20
    assert timed_rounds_per_batch(32, small) == 32  # small inputs: the whole batch
    big = 256 << 20
    assert timed_rounds_per_batch(32, big) == max(MIN_BLOCK_CALLS, TIMED_BATCH_HOST_BYTES // big)
    huge = 2 * TIMED_BATCH_HOST_BYTES
    assert timed_rounds_per_batch(32, huge) == MIN_BLOCK_CALLS
    assert timed_rounds_per_batch(2, huge) == 2  # never more than the batch itself


def test_the_planner_caps_timed_batches_and_not_correctness_batches(data_dir):
    from evalfarm.judge.arena import Arena
    from evalfarm.judge.audits import AuditSchedule
    from evalfarm.judge.inputs import InputSource
    from evalfarm.judge.roles import CANDIDATE, REFERENCE
    from evalfarm.judge.rounds import RoundPlanner
    from evalfarm.tasks.format import instantiate_task

    module = instantiate_task(as_task(str(data_dir / "task_scale.py")), "default")
    source = InputSource(module, "cpu", secret=b"k" * 32)
    sample = source.inputs(-1)
    in_bytes = sum(v.numel() * v.element_size() for v in sample if isinstance(v, torch.Tensor))
    rounds, correct = 8, 16
    arenas = {(role, kind): Arena.allocate(rounds * (in_bytes + 4096), "cpu")
              for role in (REFERENCE, CANDIDATE) for kind in ("in", "out")}
    planner = RoundPlanner(arenas, source, [(tuple(sample[0].shape), sample[0].dtype)], random.Random(0),
                           torch.device("cpu"), rounds, range(0), num_correctness_inputs=correct, timed=True,
                           timed_rounds_per_batch=5)
    audits = AuditSchedule(0.1, correct, random.Random(1))
    try:
        assert len(planner.plan(0, audits, warm_calls=False)) == rounds
        timed = planner.plan(correct, audits, warm_calls=False)
        assert len(timed) == 5 and [p.block_call for p in timed] == list(range(5))
    finally:
        for a in arenas.values():
            a.close()
