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
    MAX_SPACER_BYTES,
    PLACE_CALLS_ENV,
    PLACEMENT_NOTE,
    SPACER_ALIGN,
    CallPlacement,
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


def test_a_workers_spacers_differ_call_by_call_and_seeds_differ():
    a, b = CallPlacement(torch, "cpu", seed=1), CallPlacement(torch, "cpu", seed=2)
    sizes_a = [a.spacer().numel() for _ in range(50)]
    sizes_b = [b.spacer().numel() for _ in range(50)]
    assert len(set(sizes_a)) > 40 and sizes_a != sizes_b
    assert a.placed == 50 and a.skipped == 0


def test_a_spacer_that_cannot_be_had_is_skipped_not_an_error():
    placement = CallPlacement(torch, "cpu", seed=3, max_bytes=1 << 62)  # more than any address space
    spacers = [placement.spacer() for _ in range(5)]
    assert placement.skipped >= 4 and spacers.count(None) == placement.skipped  # a draw may be tiny


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
