"""Audits beside the next block (evalfarm.judge.audit_overlap): correctness blocks of half a batch
take turns between the arenas' halves, so one block's slots stay as they were while the next runs;
its audits run in a helper thread beside the reference's next block and are finished before the
candidate's runs. The same verdicts as without, the earlier round's verdict first."""

from __future__ import annotations

import random
import types

import pytest
import torch

from evalfarm import ScoreConfig, Verdict
from evalfarm.judge.arena import ALIGN, Arena
from evalfarm.judge.audit_overlap import AUDIT_OVERLAP_ENV, audit_overlap_wanted
from evalfarm.judge.audits import AuditSchedule
from evalfarm.judge.inputs import InputSource
from evalfarm.judge.roles import CANDIDATE, REFERENCE
from evalfarm.judge.rounds import RoundPlanner
from evalfarm.scoring import as_candidate, as_task, score


def test_the_switch_is_off_unless_set():
    assert not audit_overlap_wanted("", "cuda") and not audit_overlap_wanted("", "cpu")
    assert audit_overlap_wanted("1", "cpu") and audit_overlap_wanted("1", "cuda") and not audit_overlap_wanted("0", "cuda")
    with pytest.raises(ValueError, match=AUDIT_OVERLAP_ENV):
        audit_overlap_wanted("yes", "cuda")


def test_an_arena_resets_only_to_an_aligned_offset_inside_it():
    arena = Arena.allocate(8 * ALIGN, "cpu")
    try:
        arena.reset(4 * ALIGN)
        assert arena.alloc((4,), torch.float32).offset == 4 * ALIGN
        for bad in (-ALIGN, ALIGN // 2, 9 * ALIGN):
            with pytest.raises(ValueError, match="arena reset"):
                arena.reset(bad)
    finally:
        arena.close()


def _planner(pipelined: bool, input_slack: int = 0) -> tuple[RoundPlanner, list[Arena]]:
    mod = types.ModuleType("overlap_task")
    mod.get_inputs = lambda: [torch.randn(100)]
    mod.get_init_inputs = lambda: []
    per_round = 512  # 400 bytes of inputs or outputs, aligned
    arenas = {(role, kind): Arena.allocate(8 * per_round + (input_slack if kind == "in" else 0), "cpu")
              for role in (REFERENCE, CANDIDATE) for kind in ("in", "out")}
    planner = RoundPlanner(arenas, InputSource(mod, "cpu", bytes(32)), [((100,), torch.float32)], random.Random(1),
                           torch.device("cpu"), rounds_per_batch=8, block_rounds=range(1, 30),
                           num_correctness_inputs=30, timed=False, input_slack=input_slack)
    planner.pipelined = pipelined
    return planner, list(arenas.values())


def _offsets(plans, role: str, kind: str) -> set[int]:
    return {s.offset for plan in plans for s in (plan.calls[role].in_slots if kind == "in" else plan.calls[role].out_slots)}


@pytest.mark.parametrize("slack", [0, 3 * ALIGN])
def test_pipelined_blocks_take_turns_between_the_arenas_halves(slack):
    planner, arenas = _planner(True, slack)
    audits = AuditSchedule(1.0, 30, random.Random(0))
    try:
        assert list(planner.batch_rounds(1)) == [1, 2, 3, 4]  # half a batch of 8
        first = planner.plan(1, audits, False)
        second = planner.plan(5, audits, False)
        third = planner.plan(9, audits, False)
        assert [p.r for p in second] == [5, 6, 7, 8] and [p.r for p in third] == [9, 10, 11, 12]
        for role in (REFERENCE, CANDIDATE):
            for kind in ("in", "out"):
                a, b, c = (_offsets(x, role, kind) for x in (first, second, third))
                assert not a & b and a == c, (role, kind, a, b)  # the next block never touches the last one's
                half = (8 * 512) // 2
                assert all(o < half for o in a) != all(o < half for o in b)
                assert max(a | b) + 512 <= 8 * 512  # the input slack (timed batches') is in neither half
        # A batch that is no block (the warm-up round, the timed rounds) starts at the arena's start.
        assert min(_offsets(planner.plan(0, audits, False), CANDIDATE, "in")) == 0
    finally:
        for arena in arenas:
            arena.close()


def test_without_the_overlap_batches_are_whole():
    planner, arenas = _planner(False)
    try:
        assert list(planner.batch_rounds(1)) == list(range(1, 9))
    finally:
        for arena in arenas:
            arena.close()


QUICK = ScoreConfig(num_correctness_inputs=200, timing_budget_s=0.3, min_timed_rounds=10)


def _both(monkeypatch, task, candidate, build_pool):
    results = {}
    for setting in ("1", "0"):
        monkeypatch.setenv(AUDIT_OVERLAP_ENV, setting)
        results[setting] = score(task, candidate, QUICK, build_pool=build_pool)
    return results["1"], results["0"]


@pytest.mark.parametrize("candidate, verdict", [("cand_same.py", Verdict.OK), ("cand_wrong_after_12.py",
                                                                                 Verdict.INCORRECT),
                                                ("cand_mutates.py", Verdict.INCORRECT)])
def test_the_same_verdict_with_and_without_the_overlap(monkeypatch, data_dir, build_pool, candidate, verdict):
    task = as_task(str(data_dir / "task_scale.py"))
    on, off = _both(monkeypatch, task, as_candidate(str(data_dir / candidate)), build_pool)
    assert on.verdict is verdict and off.verdict is verdict, (on.detail, off.detail)
    assert "rounds_audit_overlapped" not in off.evidence.phases_s
    if verdict is Verdict.OK:
        assert "rounds_audit_overlapped" in on.evidence.phases_s
        assert on.evidence.correctness_inputs == off.evidence.correctness_inputs == QUICK.num_correctness_inputs
    else:
        assert on.detail.split(":")[0] == off.detail.split(":")[0], (on.detail, off.detail)


FAILING_REFERENCE = '''
import torch
import torch.nn as nn

n = 8192


class Model(nn.Module):
    """relu(x) * 1.5, whose worker's calls fail from its 30th on (the judge's own few are fine)."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls >= 30:
            raise RuntimeError("the reference fails from here on")
        return torch.relu(x) * 1.5


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
'''

def wrong_from(calls: int, scale: float) -> str:
    """A candidate for ``relu(x) * scale`` that is right for its first ``calls - 1`` calls, then off by one."""
    return f'''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        y = torch.relu(x) * {scale}
        return y + 1.0 if self.calls >= {calls} else y
'''


MUTATES_FROM_30 = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(8192))
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls >= 30:  # in a correctness block: caught by the audits that overlap the next one
            x.relu_()
            return x * self.scale + self.bias
        return torch.relu(x) * self.scale + self.bias
'''


def test_an_input_written_in_place_inside_a_block_is_caught_with_the_overlap(monkeypatch, tmp_path, data_dir,
                                                                            build_pool):
    (tmp_path / "cand.py").write_text(MUTATES_FROM_30)
    on, off = _both(monkeypatch, as_task(str(data_dir / "task_scale.py")), as_candidate(str(tmp_path / "cand.py")),
                    build_pool)
    assert off.verdict is Verdict.INCORRECT and "in place" in off.detail, off.detail
    assert on.verdict is Verdict.INCORRECT and "in place" in on.detail, on.detail
    assert on.detail.split("(")[-1] == off.detail.split("(")[-1]  # the same round
    assert "rounds_audit_overlapped" in on.evidence.phases_s


def test_an_earlier_rounds_verdict_comes_before_the_reference_failing_in_the_next_block(
        monkeypatch, tmp_path, build_pool):
    """The candidate goes wrong in the first block (rounds 5-20 with the overlap: half of 32); the
    reference's calls fail in the second, while the first block's audits still run beside it: the
    verdict is the wrong output's, as the rounds' order says."""
    (tmp_path / "task.py").write_text(FAILING_REFERENCE)
    (tmp_path / "cand.py").write_text(wrong_from(14, 1.5))
    monkeypatch.setenv(AUDIT_OVERLAP_ENV, "1")
    r = score(as_task(str(tmp_path / "task.py")), as_candidate(str(tmp_path / "cand.py")), QUICK, build_pool=build_pool)
    assert r.verdict is Verdict.INCORRECT, r.detail
    first_wrong = int(r.detail.split("correctness input ")[1].split(" ")[0])
    assert 5 < first_wrong <= 21, r.detail  # a round of the first block


@pytest.mark.gpu
def test_on_a_gpu_audits_overlap_and_verdicts_stay(monkeypatch, tmp_path, data_dir, build_pool):
    monkeypatch.setenv(AUDIT_OVERLAP_ENV, "1")
    cfg = ScoreConfig(device="cuda", num_correctness_inputs=600, timing_budget_s=1.0)
    task = as_task(str(data_dir / "gpu" / "task_relu.py"))
    same = score(task, as_candidate(str(data_dir / "gpu" / "cand_same.py")), cfg, build_pool=build_pool)
    assert same.verdict is Verdict.OK, same.detail
    assert same.evidence.phases_s.get("rounds_audit_overlapped", 0) > 0, same.evidence.phases_s
    (tmp_path / "cand.py").write_text(wrong_from(300, 1.0))
    wrong = score(task, as_candidate(str(tmp_path / "cand.py")), cfg, build_pool=build_pool)
    assert wrong.verdict is Verdict.INCORRECT and "correctness input" in wrong.detail, wrong.detail
