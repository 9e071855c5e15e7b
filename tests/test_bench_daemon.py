"""The daemon benchmark's stream and summary (the run itself: `make bench-daemon`, a long test; KernelBench
tasks and the target figures: tests/test_bench_daemon_stream.py)."""

from __future__ import annotations

import json

import pytest

from evalfarm.bench_daemon import Sampler, build_stream, main, markdown, summarise
from tests.sandbox_under_test import DAEMON_ARGS


def test_stream_takes_group_per_task_and_every_source_is_unique():
    stream = build_stream("cpu", 10, 4)
    assert len(stream) == 10
    tasks = [it.task for it in stream]
    assert tasks[:4] == [tasks[0]] * 4 and tasks[4] != tasks[0]  # G in a row, then the next task
    assert len({it.source for it in stream}) == 10  # no result-cache hits
    assert {"fast", "wrong", "identical"} <= {it.kind for it in stream}
    assert all("class ModelNew" in it.source for it in stream)


def test_summary_counts_and_percentiles():
    rows = [{"latency_s": float(i), "phases_s": {"judge_setup": 1.0, "timing": 0.5, "total": 2.0 + i},
             "verdict": "OK" if i % 2 else "INCORRECT", "build_s": 0.0} for i in range(1, 11)]
    sampler = Sampler.__new__(Sampler)
    sampler.queue, sampler.util = [(0.0, 3, 1), (1.0, 7, 1)], []
    sampler.util_per_gpu, sampler.slots, sampler.gpu_model = [], 2, "cpu"
    s = summarise(rows, 60.0, sampler, [{"task": "L1/1", "variant": "v", "speedups": [2.0, 2.2], "cv": 0.0476}], "cpu")
    assert s["candidates_per_minute"] == 10.0 and s["latency_s_median"] in (5.0, 6.0) and s["latency_s_p95"] == 10.0
    assert s["evaluation_s_median"] in (7.0, 8.0) and s["phase_s_median"]["timing"] == 0.5
    assert s["verdicts"] == {"OK": 5, "INCORRECT": 5} and s["queue_depth_max"] == 7 and s["gpu_busy_fraction"] is None
    assert s["candidates_per_minute_per_slot"] == 5.0 and s["slots"] == 2 and s["gpu_busy_fraction_per_gpu"] == []
    text = markdown(s)
    assert "| 10.00 | 5.00 |" in text and "4.76%" in text and "Slots: 2" in text


def test_gpu_busy_is_the_mean_over_the_hosts_gpus():
    sampler = Sampler.__new__(Sampler)
    sampler.queue, sampler.util = [], [50.0, 100.0]
    sampler.util_per_gpu, sampler.slots, sampler.gpu_model = [[0.0, 100.0], [100.0, 100.0]], 2, "NVIDIA H100 80GB HBM3"
    s = summarise([], 60.0, sampler, [], "cuda")
    assert s["gpu_busy_fraction"] == 0.75 and s["gpu_busy_fraction_per_gpu"] == [0.5, 1.0]
    assert "GPU busy per GPU: 50%, 100%" in markdown(s) and "NVIDIA H100 80GB HBM3" in markdown(s)


@pytest.mark.long
def test_a_short_run_through_a_real_daemon(tmp_path):
    assert main(["--device", "cpu", "--candidates", "4", "--group", "2", "--rescore", "1", "--repeats", "2",
                 "--kernelbench-root", "none", "--out", str(tmp_path), *DAEMON_ARGS]) == 0
    data = json.loads((tmp_path / "bench_daemon.json").read_text())
    assert data["summary"]["candidates"] == 4 and len(data["rows"]) == 4
    assert sum(data["summary"]["verdicts"].values()) == 4 and len(data["summary"]["reward_cv"]) == 1
    assert data["summary"]["correctness_block"] is True
    assert any((r["block_rounds"] or 0) > 0 for r in data["rows"]), data["rows"]


@pytest.mark.long
def test_correctness_blocks_can_be_switched_off_for_the_stream(tmp_path):
    assert main(["--device", "cpu", "--candidates", "2", "--group", "2", "--rescore", "0", "--kernelbench-root",
                 "none", "--no-correctness-block", "--out", str(tmp_path), *DAEMON_ARGS]) == 0
    data = json.loads((tmp_path / "bench_daemon.json").read_text())
    assert data["summary"]["correctness_block"] is False and data["summary"]["candidates"] == 2
    assert all(r["block_rounds"] in (0, None) for r in data["rows"]) and any(r["timed_rounds"] for r in data["rows"])
    assert "correctness blocks off" in (tmp_path / "bench_daemon.md").read_text()


def test_the_stream_can_be_limited_to_named_tasks_in_their_order():
    stream = build_stream("cpu", 9, 3, ["L1/8", "L1/7"])
    assert [it.task for it in stream] == ["L1/8"] * 3 + ["L1/7"] * 3 + ["L1/8"] * 3
    with pytest.raises(SystemExit, match="no built-in task L9/9; the built-in tasks are L1/1"):
        build_stream("cpu", 4, 2, ["L1/7", "L9/9"])


def test_task_and_warm_call_choices_reach_the_summary_line():
    sampler = Sampler.__new__(Sampler)
    sampler.queue, sampler.util, sampler.util_per_gpu, sampler.slots, sampler.gpu_model = [], [], [], 1, "cpu"
    s = summarise([], 1.0, sampler, [], "cpu")
    s.update(warm_call="off", tasks=["L1/7", "L3/1"])
    assert ", warm calls off, tasks L1/7,L3/1" in markdown(s).splitlines()[0]
