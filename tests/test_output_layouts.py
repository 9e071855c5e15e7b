"""Outputs in a dense layout of their own (column-major, channels-last) reach the judge in that
layout: copied as one block, read back with the reported strides (evalfarm.judge.arena)."""

from __future__ import annotations

import pytest
import torch

from evalfarm import ScoreConfig, Verdict
from evalfarm.judge.arena import Arena, dense_permutation, dense_strides
from evalfarm.scoring import as_candidate, as_task
from tests.traced_scoring import traced_score

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


@pytest.mark.parametrize("wrong", [False, True], ids=["right", "one-element-wrong"])
def test_a_column_major_candidate_is_judged_by_its_values_and_copied_in_its_own_layout(
        monkeypatch, data_dir, tmp_path, build_pool, wrong):
    # What each call's output copy costs is the judge's clock's business (the exchange charge);
    # here, what decides that cost: the worker copies the column-major output as one block in its
    # own layout and reports its strides, so the copy is what a row-major one costs, never an
    # element-by-element transpose (~5 ms for 16 MB on a 2-core host). (Its timing effect is
    # measured by scripts/honest_sweep.py and the GPU suite, not here: load moves it.)
    task = as_task(str(data_dir / "task_matrix.py"))
    source = COLUMN_MAJOR.format(wrong="out[3, 5] += 1.0" if wrong else "")
    cfg = ScoreConfig(num_correctness_inputs=30, timing_budget_s=0.5, min_timed_rounds=14, charge_exchange=True)
    r, lines = traced_score(monkeypatch, tmp_path, task, as_candidate(source), build_pool, cfg, {})
    if wrong:
        assert r.verdict is Verdict.INCORRECT and "correctness input" in r.detail, (r.verdict, r.detail)
        return
    assert r.verdict is Verdict.OK, (r.verdict, r.detail)
    n = 1024  # task_matrix's size
    cand = [x for x in lines if x["role"] == "candidate" and "call_us" in x]
    ref = [x for x in lines if x["role"] == "reference" and "call_us" in x]
    assert cand and ref
    for line in cand:  # every call's output, block or lone: column-major strides reported
        per_call = line["strides"] if line["block"] else [line["strides"]]
        assert all(s == [[1, n]] for s in per_call), line
    assert not any("strides" in x for x in ref)  # the reference's row-major output: no strides
