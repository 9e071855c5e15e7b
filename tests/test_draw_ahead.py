"""Drawing ahead (evalfarm.judge.draw_ahead): the next correctness block's inputs drawn in a helper
thread while the workers run this one. The same inputs as drawn in place, failures left to the
planner, the same verdicts either way, and memory checked before it is used."""

from __future__ import annotations

import types

import pytest
import torch

from evalfarm import ScoreConfig, Verdict
from evalfarm.judge import memory_plan
from evalfarm.judge.draw_ahead import DRAW_AHEAD_ENV, DrawAhead, draw_ahead_wanted
from evalfarm.judge.inputs import InputSource
from evalfarm.scoring import as_candidate, as_task, score

CPU = torch.device("cpu")
SECRET = bytes(range(32))


def _module(fail_at: int | None = None) -> types.ModuleType:
    """A task module whose get_inputs draws two tensors; with ``fail_at``, its draw number
    ``fail_at`` (counted from 0, across rounds) raises."""
    mod = types.ModuleType("draw_task")
    count = {"n": 0}

    def get_inputs():
        k = count["n"]
        count["n"] += 1
        if fail_at is not None and k == fail_at:
            raise RuntimeError("this draw fails")
        return [torch.randn(64), torch.rand(3, 5), 7]

    mod.get_inputs = get_inputs
    mod.get_init_inputs = lambda: []
    return mod


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y
                                    for x, y in zip(a, b, strict=True))


def test_the_switch_is_on_a_cpu_unless_set():
    assert draw_ahead_wanted("", "cpu") and not draw_ahead_wanted("", "cuda")
    assert draw_ahead_wanted("1", "cuda") and not draw_ahead_wanted("0", "cpu")
    with pytest.raises(ValueError, match=DRAW_AHEAD_ENV):
        draw_ahead_wanted("on", "cpu")


def test_inputs_drawn_ahead_are_the_ones_drawn_in_place():
    phases: dict[str, float] = {}
    ahead = DrawAhead(InputSource(_module(), "cpu", SECRET), CPU, phases)
    ahead.start(range(5, 9))
    ahead.join()
    in_place = InputSource(_module(), "cpu", SECRET)
    for r in range(5, 9):
        drawn = ahead.take(r)
        assert drawn is not None and _same(drawn, in_place.inputs(r))
        assert ahead.take(r) is None  # taken once
    assert ahead.take(9) is None and ahead.take(4) is None  # rounds not drawn
    assert phases["rounds_inputs_ahead"] > 0


def test_widened_rounds_are_widened_ahead_too():
    from evalfarm.judge.precision import WidenSpec

    def source() -> InputSource:
        s = InputSource(_module(), "cpu", SECRET)
        s.widen(WidenSpec(positions=(1,), symmetric=(False,)), [6])
        return s

    ahead = DrawAhead(source(), CPU)
    ahead.start(range(5, 8))
    ahead.join()
    in_place = source()
    for r in range(5, 8):
        assert _same(ahead.take(r), in_place.inputs(r))
    assert bool((source().inputs(6)[1] < 0).any()) and not bool((source().inputs(5)[1] < 0).any())


def test_a_draw_that_fails_ahead_is_left_to_the_planner(caplog):
    """The thread stops at the failing round (and says so); the rounds before it are there, the rest
    are not, and the planner's own draw of that round meets the failure where it always did."""
    source = InputSource(_module(fail_at=2), "cpu", SECRET)
    ahead = DrawAhead(source, CPU)
    ahead.start(range(10, 15))
    ahead.join()
    assert "drawing ahead stopped" in caplog.text and "this draw fails" in caplog.text
    assert ahead.take(10) is not None and ahead.take(11) is not None
    assert all(ahead.take(r) is None for r in range(12, 15))
    in_place = InputSource(_module(fail_at=2), "cpu", SECRET)
    in_place.inputs(10), in_place.inputs(11)
    with pytest.raises(RuntimeError, match="this draw fails"):
        in_place.inputs(12)


def test_one_batch_at_a_time_and_nothing_taken_while_drawing():
    ahead = DrawAhead(InputSource(_module(), "cpu", SECRET), CPU)
    ahead.start(range(0, 2))
    with pytest.raises(RuntimeError, match="join it first"):
        ahead.start(range(2, 4))
    with pytest.raises(RuntimeError, match="still being drawn"):
        ahead.take(0)
    ahead.join()
    assert ahead.take(0) is not None and ahead.take(1) is not None and ahead.take(2) is None


def test_memory_for_a_second_batch_is_checked():
    gate = memory_plan.MemoryGate(CPU)
    assert gate.room_for(1 << 40)  # off CUDA: host memory is bounded by the workers' limits instead
    gate.enabled = True
    assert not gate.room_for(1)  # no plan checked yet: no room assumed
    fp = memory_plan.Footprint(input_bytes=1 << 20, weight_bytes=0, output_bytes=1 << 20, call_peak_bytes=2 << 20)
    gate.last = memory_plan.plan(fp, free_bytes=10 << 30, total_bytes=16 << 30, rounds_per_batch=4)
    room = gate.last.free_bytes - gate.last.run_bytes
    assert gate.room_for(int(room / memory_plan.SLACK) - 1)
    assert not gate.room_for(room)


QUICK = ScoreConfig(num_correctness_inputs=200, timing_budget_s=0.3, min_timed_rounds=10)


@pytest.mark.parametrize("candidate, verdict", [("cand_same.py", Verdict.OK), ("cand_wrong_after_12.py",
                                                                                 Verdict.INCORRECT)])
def test_the_same_verdict_with_and_without_drawing_ahead(monkeypatch, data_dir, build_pool, candidate, verdict):
    task = as_task(str(data_dir / "task_scale.py"))
    results = {}
    for setting in ("1", "0"):
        monkeypatch.setenv(DRAW_AHEAD_ENV, setting)
        results[setting] = score(task, as_candidate(str(data_dir / candidate)), QUICK, build_pool=build_pool)
    on, off = results["1"], results["0"]
    assert on.verdict is verdict and off.verdict is verdict, (on.detail, off.detail)
    # Drawn ahead only where the setting allows; every round still checked.
    assert "rounds_inputs_ahead" in on.evidence.phases_s and "rounds_inputs_ahead" not in off.evidence.phases_s
    if verdict is Verdict.INCORRECT:  # caught at the same correctness input either way
        assert on.detail.split(":")[0] == off.detail.split(":")[0], (on.detail, off.detail)
    else:
        assert on.evidence.correctness_inputs == off.evidence.correctness_inputs == QUICK.num_correctness_inputs


@pytest.mark.gpu
def test_on_a_gpu_inputs_drawn_ahead_are_the_ones_drawn_in_place_and_scores_go_on(monkeypatch, data_dir, build_pool):
    """The thread draws on the device through the device's own generator (seeded per round), as the
    planner does in place; and a copy of a GPU task's reference is OK with its inputs drawn ahead."""
    cuda = torch.device("cuda")
    gpu_module = types.ModuleType("gpu_draw_task")
    gpu_module.get_inputs = lambda: [torch.randn(1 << 16), torch.rand(64, 64)]
    gpu_module.get_init_inputs = lambda: []
    ahead = DrawAhead(InputSource(gpu_module, "cuda", SECRET), cuda)
    ahead.start(range(3, 9))
    ahead.join()
    in_place = InputSource(gpu_module, "cuda", SECRET)
    for r in range(3, 9):
        drawn = ahead.take(r)
        assert drawn is not None and drawn[0].is_cuda and _same(drawn, in_place.inputs(r))
    monkeypatch.setenv(DRAW_AHEAD_ENV, "1")
    r = score(as_task(str(data_dir / "gpu" / "task_relu.py")), as_candidate(str(data_dir / "gpu" / "cand_same.py")),
              ScoreConfig(device="cuda", num_correctness_inputs=300, timing_budget_s=1.0), build_pool=build_pool)
    assert r.verdict is Verdict.OK, r.detail
    assert r.evidence.phases_s.get("rounds_inputs_ahead", 0) > 0, r.evidence.phases_s
