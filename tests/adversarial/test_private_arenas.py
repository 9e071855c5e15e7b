"""Arenas are private to one evaluation (finding 5 of the sandbox issue).

An attacker used to find every evaluation's arenas as files in /dev/shm and NaN-fill a
neighbour's output arena. Arenas are now unnamed memfds that only the owning worker inherits.
"""

from __future__ import annotations

import os

import pytest
import torch
from attack_scoring import RUNTIME, host_channel

from evalfarm import ScoreConfig, Verdict
from evalfarm.judge.arena import Arena
from evalfarm.scoring import as_candidate, as_task, start

QUICK = ScoreConfig(num_correctness_inputs=40, timing_budget_s=1.0, min_timed_rounds=35)


def test_two_concurrent_evaluations_cannot_reach_each_others_arenas(data_dir, build_pool, tmp_path):
    task = as_task(str(data_dir / "task_scale.py"))
    with host_channel() as shared:
        report = shared / "seen"
        source = (RUNTIME / "arena_neighbour.py").read_text().replace('REPORT_PATH = ""', f"REPORT_PATH = {str(report)!r}")
        attacker = start(task, as_candidate(source), QUICK, build_pool)
        honest = start(task, as_candidate(str(data_dir / "cand_fast.py")), QUICK, build_pool)
        a, h = attacker.result(600), honest.result(600)
        seen = report.read_text()
    # The attacker held no arena descriptor (it raises naming any it finds, after NaN-filling it)
    # and its neighbour scored as an honest candidate does.
    assert a.verdict is Verdict.OK, (a.verdict, a.detail)
    assert h.verdict is Verdict.OK, (h.verdict, h.detail)
    # Its own arenas are unnamed memfds, so the neighbour's (made the same way) have no name in
    # /dev/shm either. (Names it saw there, if any, are other people's: this code makes none.)
    mapped = [line.split(" ", 1)[1] for line in seen.splitlines() if line.startswith("mapped ")]
    assert mapped and all(m.startswith("/memfd:evalfarm-arena") for m in mapped), mapped


def test_a_sealed_arena_cannot_be_resized_under_the_judge():
    arena = Arena.allocate(4096, "cpu")
    try:
        view = arena.view(arena.alloc((16,), torch.float32))
        view.fill_(2.0)
        for size in (0, 1 << 20):
            with pytest.raises(PermissionError):
                os.ftruncate(arena.fd, size)
        # The worker's side maps the same memory from its own copy of the descriptor.
        other = Arena.attach({"kind": "memfd", "fd": os.dup(arena.fd), "nbytes": arena.capacity})
        assert torch.equal(other.buffer[:64].view(torch.float32), view)
    finally:
        arena.close()


def test_attach_refuses_a_descriptor_of_the_wrong_size():
    arena = Arena.allocate(4096, "cpu")
    try:
        with pytest.raises(RuntimeError, match="expected"):
            Arena.attach({"kind": "memfd", "fd": os.dup(arena.fd), "nbytes": 8192})
    finally:
        arena.close()
