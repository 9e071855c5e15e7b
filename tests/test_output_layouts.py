"""Outputs in a dense layout of their own (column-major, channels-last) reach the judge in that
layout: copied as one block, read back with the reported strides (evalfarm.judge.arena)."""

from __future__ import annotations

import statistics
import time

import pytest
import torch

from evalfarm import ScoreConfig, Verdict
from evalfarm.judge.arena import Arena, dense_permutation, dense_strides
from evalfarm.scoring import as_candidate, as_task, score

COLUMN_MAJOR = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_strided(x.shape, (1, x.shape[0]), dtype=x.dtype)  # column-major
        torch.add(x * 2.0, 1.0, out=out)
        {wrong}
        return out
'''


@pytest.mark.parametrize(("shape", "strides", "dense"), [
    ((4, 5), (5, 1), True),
    ((4, 5), (1, 4), True),  # column-major
    ((2, 3, 4, 5), (60, 1, 15, 3), True),  # channels-last
    ((1, 3, 1), (7, 1, 99), True),  # size-1 dimensions place nothing
    ((4, 5), (0, 1), False),  # broadcast: overlapping
    ((4, 5), (10, 1), False),  # a gap between rows
    ((4, 5), (5, 1, 1), False),
    ((4, 5), (5, -1), False),
    ((4, 5), (True, 1), False),
])
def test_dense_permutation(shape, strides, dense):
    assert dense_permutation(shape, strides) is dense


def test_a_column_major_output_is_copied_as_one_block_and_read_back_in_its_layout():
    arena = Arena.allocate(1 << 16, "cpu")
    try:
        slot = arena.alloc((64, 32), torch.float32)
        src = torch.randn(64, 32)
        cm = torch.empty_strided((64, 32), (1, 64))
        cm.copy_(src)
        strides = dense_strides(cm)
        assert strides == [1, 64] and dense_strides(src) is None and dense_strides(src[:, :16]) is None
        arena.strided_view(slot, strides).copy_(cm)
        assert torch.equal(arena.strided_view(slot, strides), src)
        assert torch.equal(arena.view(slot).view(-1), cm.t().reshape(-1))  # its memory order, one block
        with pytest.raises(ValueError):
            arena.strided_view(slot, [0, 1])  # a worker's report is checked
    finally:
        arena.close()


TASK_N = 2048


@pytest.mark.exclusive  # the exchange excess is measured while no other evaluation competes for the cores
@pytest.mark.parametrize("wrong", [False, True], ids=["right", "one-element-wrong"])
def test_a_column_major_candidate_is_judged_by_its_values_and_not_charged_for_its_layout(
        data_dir, tmp_path, build_pool, wrong):
    # 16 MB, so that an element-wise copy (~5 ms on a 2-core host) stands far above the noise of
    # the leftovers (0-0.45 ms on a loaded runner with a 4 MB output).
    task_file = tmp_path / "task_matrix_2048.py"
    task_file.write_text((data_dir / "task_matrix.py").read_text().replace("n = 1024", f"n = {TASK_N}"))
    task = as_task(str(task_file))
    source = COLUMN_MAJOR.format(wrong="out[3, 5] += 1.0" if wrong else "")
    cfg = ScoreConfig(num_correctness_inputs=30, timing_budget_s=1.0, min_timed_rounds=35, charge_exchange=True)
    r = score(task, as_candidate(source), cfg, build_pool=build_pool)
    if wrong:
        assert r.verdict is Verdict.INCORRECT and "correctness input" in r.detail, (r.verdict, r.detail)
        return
    assert r.verdict is Verdict.OK, (r.verdict, r.detail)
    # Copied into a row-major slot element by element, the output's copy after each call would cost
    # what that transposing copy costs here (timed below, under this host's present load), nearly
    # all of it charged; in its own layout it is one block and costs what the reference's copy does.
    transposing_copy_us = _median_transposing_copy_us(TASK_N)
    assert r.evidence.timing.exchange_excess_us < 0.25 * transposing_copy_us, (transposing_copy_us, r.evidence.timing)


def _median_transposing_copy_us(n: int, reps: int = 11) -> float:
    """What copying a column-major n x n float32 output into a row-major slot costs here, in us."""
    src = torch.empty_strided((n, n), (1, n)).normal_()
    dst = torch.empty(n, n)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        dst.copy_(src)
        times.append((time.perf_counter_ns() - t0) / 1e3)
    return statistics.median(times)
