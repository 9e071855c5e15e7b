"""CPU cores for a GPU evaluation's judge and workers (evalfarm.judge.cpu_pinning)."""

from __future__ import annotations

import os

import pytest

from evalfarm.judge import cpu_pinning
from evalfarm.judge.worker import REFERENCE
from evalfarm.judge.worker_processes import WorkerHandle


def test_each_process_of_a_gpu_evaluation_gets_a_core_of_its_own(monkeypatch):
    monkeypatch.setenv(cpu_pinning.PIN_ENV, "1")
    allowed = set(range(16))
    first = cpu_pinning.plan("cuda", allowed)
    assert first == cpu_pinning.CorePlan(judge=0, reference=1, candidate=2)
    assert first == cpu_pinning.plan("cuda:0", allowed)
    third = cpu_pinning.plan("cuda:2", allowed)
    assert third is not None and {third.judge, third.reference, third.candidate} == {6, 7, 8}
    assert third.worker("reference") == 7 and third.worker("candidate") == 8
    wrapped = cpu_pinning.plan("cuda:5", allowed)  # 15, then round again
    assert wrapped is not None and [wrapped.judge, wrapped.reference, wrapped.candidate] == [15, 0, 1]
    sparse = cpu_pinning.plan("cuda:0", {4, 9, 33})  # the allowed cores, whatever their numbers
    assert sparse is not None and sorted([sparse.judge, sparse.reference, sparse.candidate]) == [4, 9, 33]


def test_shared_pinning_puts_all_three_processes_of_a_gpu_evaluation_on_one_core(monkeypatch):
    monkeypatch.setenv(cpu_pinning.PIN_ENV, "shared")
    allowed = set(range(16))
    assert cpu_pinning.plan("cuda:0", allowed) == cpu_pinning.CorePlan(judge=0, reference=0, candidate=0)
    assert cpu_pinning.plan("cuda:3", allowed) == cpu_pinning.CorePlan(judge=3, reference=3, candidate=3)
    assert cpu_pinning.plan("cuda:17", allowed) == cpu_pinning.CorePlan(judge=1, reference=1, candidate=1)
    assert cpu_pinning.plan("cuda:1", {5, 7, 40}) == cpu_pinning.CorePlan(judge=7, reference=7, candidate=7)
    assert cpu_pinning.plan("cpu", allowed) is None
    for value, expected in (("own", "own"), ("1", "own"), ("SHARED", "shared"), ("0", "off"), ("junk", "off")):
        monkeypatch.setenv(cpu_pinning.PIN_ENV, value)
        assert cpu_pinning.mode() == expected


def test_pinning_is_off_by_default_and_never_for_cpu_evaluations_or_small_hosts(monkeypatch):
    monkeypatch.delenv(cpu_pinning.PIN_ENV, raising=False)
    assert cpu_pinning.plan("cuda:0", set(range(16))) is None  # measured no better: opt-in
    monkeypatch.setenv(cpu_pinning.PIN_ENV, "1")
    assert cpu_pinning.plan("cpu", set(range(16))) is None
    assert cpu_pinning.plan("cuda:0", {0, 1}) is None
    monkeypatch.setenv(cpu_pinning.PIN_ENV, "0")
    assert cpu_pinning.plan("cuda:0", set(range(16))) is None


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two allowed cores")
def test_a_worker_started_on_a_core_runs_there(tmp_path):
    core = max(os.sched_getaffinity(0))
    worker = WorkerHandle("cpu", str(tmp_path / "w"), REFERENCE, cpu_core=core)
    try:
        assert os.sched_getaffinity(worker.proc.pid) == {core}
    finally:
        worker.close()
    unpinned = WorkerHandle("cpu", str(tmp_path / "u"), REFERENCE)
    try:
        assert os.sched_getaffinity(unpinned.proc.pid) == os.sched_getaffinity(0)
    finally:
        unpinned.close()
