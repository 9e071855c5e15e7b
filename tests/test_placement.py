"""evalfarm.judge.placement: each timed call's memory placed anew (a spacer of a random size held
across the call), on a GPU by default; the switch, the draw, the worker's spacers and the note."""

from __future__ import annotations

import random

import pytest
import torch
from traced_scoring import traced_score

from evalfarm import ScoreConfig, Verdict
from evalfarm.judge.exchange import Switches
from evalfarm.judge.placement import (
    INPUT_SLACK_BYTES,
    MAX_SPACER_BYTES,
    PLACE_CALLS_ENV,
    PLACEMENT_NOTE,
    SMALL_POOL_BYTES,
    SPACER_ALIGN,
    CallPlacement,
    input_offset,
    place_calls_wanted,
    spacer_bytes,
)
from evalfarm.scoring import as_candidate, as_task


@pytest.mark.parametrize(("setting", "device", "wanted"), [
    ("", "cuda", True), ("", "cpu", False), (" ", "cuda", True),
    ("1", "cpu", True), ("1", "cuda", True), ("0", "cuda", False), ("0", "cpu", False),
])
def test_the_switch_places_calls_on_a_gpu_unless_told(setting, device, wanted):
    assert place_calls_wanted(setting, device) is wanted


@pytest.mark.parametrize("setting", ["yes", "2", "on"])
def test_a_bad_setting_names_the_variable_and_what_it_takes(setting):
    with pytest.raises(ValueError, match=f"{PLACE_CALLS_ENV}.*0 or 1"):
        place_calls_wanted(setting, "cuda")


def test_the_judges_switches_read_it(monkeypatch):
    monkeypatch.delenv(PLACE_CALLS_ENV, raising=False)
    assert Switches.from_env("cuda").place_calls and not Switches.from_env("cpu").place_calls
    monkeypatch.setenv(PLACE_CALLS_ENV, "0")
    assert not Switches.from_env("cuda").place_calls
    monkeypatch.setenv(PLACE_CALLS_ENV, "maybe")
    with pytest.raises(ValueError, match=PLACE_CALLS_ENV):
        Switches.from_env("cpu")


def test_spacer_sizes_are_aligned_bounded_and_spread():
    rng = random.Random(7)
    sizes = [spacer_bytes(rng) for _ in range(2000)]
    assert all(s % SPACER_ALIGN == 0 and 0 <= s < MAX_SPACER_BYTES for s in sizes)
    assert len(set(sizes)) > 1900  # 32768 possible sizes: repeats are rare
    # the draw covers the range: each eighth of it holds some of the sizes
    eighths = {s * 8 // MAX_SPACER_BYTES for s in sizes}
    assert eighths == set(range(8))


def test_a_workers_spacers_come_from_both_pools_differ_call_by_call_and_seeds_differ():
    a, b = CallPlacement(torch, "cpu", seed=1), CallPlacement(torch, "cpu", seed=2)
    sizes_a = [tuple(s.numel() for s in a.spacer()) for _ in range(50)]
    sizes_b = [tuple(s.numel() for s in b.spacer()) for _ in range(50)]
    assert all(small < SMALL_POOL_BYTES < large < MAX_SPACER_BYTES for small, large in sizes_a)
    assert len({s for s, _ in sizes_a}) > 40 and len({lg for _, lg in sizes_a}) > 40 and sizes_a != sizes_b
    assert a.placed == 50 and a.skipped == 0


def test_a_spacer_that_cannot_be_had_is_skipped_not_an_error():
    placement = CallPlacement(torch, "cpu", seed=3, max_bytes=1 << 62)  # more than any address space
    spacers = [placement.spacer() for _ in range(5)]
    assert spacers == [None] * 5 and placement.skipped == 5 and placement.placed == 0


def test_input_offsets_are_aligned_inside_the_slack_and_spread():
    rng = random.Random(11)
    offsets = [input_offset(rng) for _ in range(500)]
    assert all(o % SPACER_ALIGN == 0 and 0 <= o < INPUT_SLACK_BYTES for o in offsets)
    assert len(set(offsets)) > 490
    assert input_offset(rng, slack=0) == 0 and input_offset(rng, slack=SPACER_ALIGN - 1) == 0


def _planner(data_dir, input_slack: int, timed: bool = True):
    from evalfarm.judge.arena import Arena
    from evalfarm.judge.inputs import InputSource
    from evalfarm.judge.roles import CANDIDATE, REFERENCE
    from evalfarm.judge.rounds import RoundPlanner
    from evalfarm.tasks.format import instantiate_task

    task = as_task(str(data_dir / "task_scale.py"))
    module = instantiate_task(task, "default")
    source = InputSource(module, "cpu", secret=b"k" * 32)
    sample = source.inputs(-1)
    in_bytes = sum(v.numel() * v.element_size() for v in sample if isinstance(v, torch.Tensor))
    rounds = 4
    arenas = {(role, kind): Arena.allocate(rounds * (in_bytes + 4096) + (input_slack if kind == "in" else 0), "cpu")
              for role in (REFERENCE, CANDIDATE) for kind in ("in", "out")}
    out_struct = [(tuple(sample[0].shape), sample[0].dtype)]
    planner = RoundPlanner(arenas, source, out_struct, random.Random(0), torch.device("cpu"), rounds, range(0),
                           num_correctness_inputs=4, timed=timed, input_slack=input_slack,
                           place_rng=random.Random(5))
    return planner, arenas


def test_timed_batches_start_their_input_slots_at_a_new_offset_per_batch_and_worker(data_dir):
    from evalfarm.judge.audits import AuditSchedule
    from evalfarm.judge.roles import CANDIDATE, REFERENCE

    planner, arenas = _planner(data_dir, INPUT_SLACK_BYTES)
    audits = AuditSchedule(0.1, 4, random.Random(1))
    try:
        correctness = planner.plan(0, audits, warm_calls=False)
        assert {p.calls[REFERENCE].in_slots[0].offset for p in correctness[:1]} == {0}  # correctness: unplaced
        starts = {REFERENCE: [], CANDIDATE: []}
        for _ in range(6):
            plans = planner.plan(4, audits, warm_calls=False)
            for role in starts:
                slots = [p.calls[role].in_slots[0] for p in plans]
                starts[role].append(slots[0].offset)
                # within a batch the rounds' slots follow one another, as before
                assert [s.offset for s in slots] == sorted(s.offset for s in slots)
                assert slots[-1].offset + slots[-1].nbytes <= arenas[role, "in"].capacity
        assert all(0 <= o <= INPUT_SLACK_BYTES for o in starts[REFERENCE] + starts[CANDIDATE])
        assert len(set(starts[REFERENCE])) == 6 and starts[REFERENCE] != starts[CANDIDATE]
    finally:
        for a in arenas.values():
            a.close()


def test_without_slack_every_batch_starts_at_the_arenas_start(data_dir):
    from evalfarm.judge.audits import AuditSchedule
    from evalfarm.judge.roles import REFERENCE

    planner, arenas = _planner(data_dir, 0)
    try:
        for _ in range(3):
            plans = planner.plan(4, AuditSchedule(0.1, 4, random.Random(1)), warm_calls=False)
            assert plans[0].calls[REFERENCE].in_slots[0].offset == 0
    finally:
        for a in arenas.values():
            a.close()


QUICK = ScoreConfig(num_correctness_inputs=40, timing_budget_s=0.5, min_timed_rounds=20, warm_call=False,
                    timing_protocol="blocks")


def test_a_placed_evaluation_scores_an_identical_copy_and_says_so(monkeypatch, tmp_path, data_dir, build_pool):
    """Forced on a CPU: the timed blocks run with a spacer per call in both workers; the identical
    copy is still OK near 1 and the evidence carries the candidate worker's note. Off: no note."""
    task = as_task(str(data_dir / "task_scale.py"))
    same = as_candidate(str(data_dir / "cand_same.py"))
    r, _ = traced_score(monkeypatch, tmp_path, task, same, build_pool, QUICK, {PLACE_CALLS_ENV: "1"})
    assert r.verdict is Verdict.OK, r.detail
    assert r.evidence.timing.protocol == "blocks" and r.evidence.timing.timed_block_rounds > 0
    assert PLACEMENT_NOTE in r.evidence.isolation, r.evidence.isolation
    assert 0.5 < r.speedup < 2.0
    (tmp_path / "off").mkdir()
    r2, _ = traced_score(monkeypatch, tmp_path / "off", task, same, build_pool, QUICK, {PLACE_CALLS_ENV: "0"})
    assert r2.verdict is Verdict.OK, r2.detail
    assert PLACEMENT_NOTE not in r2.evidence.isolation


@pytest.mark.gpu
def test_on_a_gpu_timed_calls_are_placed_by_default_and_an_identical_copy_scores_one(
        monkeypatch, tmp_path, data_dir, build_pool):
    relu = as_task(str(data_dir / "gpu" / "task_relu.py"))
    same = as_candidate(str(data_dir / "gpu" / "cand_same.py"))
    cfg = QUICK.replace(device="cuda", num_correctness_inputs=200, timing_budget_s=3.0, min_timed_rounds=70)
    r, _ = traced_score(monkeypatch, tmp_path, relu, same, build_pool, cfg, {})
    assert r.verdict is Verdict.OK, r.detail
    assert r.evidence.timing.protocol == "blocks"
    assert PLACEMENT_NOTE in r.evidence.isolation, r.evidence.isolation
    assert 0.95 <= r.speedup <= 1.05, r.evidence.timing
