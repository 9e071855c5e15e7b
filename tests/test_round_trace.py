"""The round trace (evalfarm.judge.round_trace): an operator's record of every worker exchange, and
the summary script that reads it."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from evalfarm import ScoreConfig, Verdict
from evalfarm.judge.round_trace import ROUND_TRACE_ENV, RoundTrace
from evalfarm.scoring import as_candidate, as_task, score

ROOT = Path(__file__).resolve().parents[1]


def _summary_module():
    spec = importlib.util.spec_from_file_location("round_trace_summary", ROOT / "scripts" / "round_trace_summary.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_an_exchange_line_holds_the_judges_steps_and_the_workers_parts(tmp_path):
    trace = RoundTrace(str(tmp_path))
    stamps = {"start": 10.0, "prepared": 10.0002, "stopped": 10.00021, "written": 10.0005, "resumed": 10.00051,
              "replied": 10.0012, "final_stop": 10.00121}
    trace.exchange("candidate", [12], stamps, {"op": "prepared", "poison_s": 0.0001},
                   {"op": "round", "r": 12, "t": 300_000, "e": 290.0, "pre": 50_000, "post": 20_000})
    trace.counted = False
    trace.exchange("reference", [13, 14], {**stamps, "start": 10.002}, {"op": "prepared"},
                   {"op": "block", "rounds": [{"t": 1000, "pre": 1}, {"t": 3000, "pre": 1}]})
    path = trace.write()
    lines = [json.loads(x) for x in Path(path).read_text().splitlines()]
    first, second = lines
    assert first["role"] == "candidate" and first["rounds"] == [12] and first["counted"] and not first["block"]
    assert first["prepare_us"] == pytest.approx(200.0) and first["write_us"] == pytest.approx(290.0)
    assert first["go_us"] == pytest.approx(690.0) and first["poison_us"] == pytest.approx(100.0)
    assert (first["call_us"], first["event_us"], first["pre_us"], first["post_us"]) == (300.0, 290.0, 50.0, 20.0)
    assert "warm_us" not in first
    assert second["block"] and not second["counted"] and second["call_us"] == [1.0, 3.0]
    assert second["at_us"] == pytest.approx(2000.0)


def test_a_warm_call_is_its_own_step():
    trace = RoundTrace("unused")
    trace.exchange("reference", [3], {"start": 1.0, "warmed": 1.0004, "prepared": 1.0005}, {}, {"op": "error"})
    line = trace.lines[0]
    assert line["warm_us"] == pytest.approx(400.0) and line["prepare_us"] == pytest.approx(100.0)
    assert line["reply"] == "error"


def test_an_unwritable_directory_is_a_warning_not_a_failure(tmp_path, caplog):
    trace = RoundTrace(str(tmp_path / "missing"))
    trace.exchange("reference", [0], {"start": 0.0}, {}, {"op": "round", "t": 1, "pre": 0})
    assert trace.write() == ""
    assert "round trace not written" in caplog.text


def test_the_summary_pairs_rounds_and_measures_their_spread():
    mod = _summary_module()
    lines = []
    at = 0.0
    for r in range(40):
        for role, call in (("reference", 400.0 + (r % 4) * 10), ("candidate", 100.0)):
            lines.append({"role": role, "rounds": [r], "block": False, "counted": r >= 5, "at_us": at,
                          "prepare_us": 300.0, "poison_us": 100.0, "write_us": 200.0, "go_us": 700.0,
                          "pre_us": 50.0, "call_us": call, "event_us": call - 5, "post_us": 100.0})
            at += 2000.0
    res = mod.summarize(lines, skip=0)
    assert res["timed_pairs"] == 35
    assert res["speedup_median"] == pytest.approx(4.1, abs=0.11)
    assert 0 < res["speedup_spread"] < 0.1
    cand = res["steps_us"]["candidate"]
    assert cand["prepare_rest"] == 200.0 and cand["go_rest"] == 450.0
    assert cand["between"] == pytest.approx(800.0) and cand["n"] == 40


def test_the_summary_reads_timed_blocks_call_by_call_and_leaves_out_each_blocks_warm_up_call():
    mod = _summary_module()
    lines = []
    for b in range(6):
        rounds = list(range(100 + 4 * b, 104 + 4 * b))
        for role, call, after in (("reference", 400.0, 30.0), ("candidate", 100.0, 330.0)):
            lines.append({"role": role, "rounds": rounds, "block": True, "timed": True, "counted": True,
                          "call_us": [call * 3] + [call] * 3, "pre_us": [50.0] * 4,
                          "judge_us": [call * 3 + 50 + after] + [call + 50 + after] * 3})
    lines.append({"role": "reference", "rounds": [0, 1], "block": True, "counted": True, "call_us": [1.0, 1.0]})
    res = mod.summarize(lines, skip=0)
    timed = res["timed_blocks"]
    assert res["block_exchanges"] == 1  # the correctness block alone
    assert timed["reference"] == {"call": 400.0, "pre": 50.0, "judge": 480.0, "after": 30.0, "n": 18}
    assert timed["candidate"]["after"] == 330.0 and timed["pairs"] == 18 and timed["speedup_median"] == 4.0
    assert mod.summarize(lines[-1:], skip=0)["timed_blocks"] is None


def test_the_summary_splits_a_correctness_block_per_round():
    mod = _summary_module()
    trace = RoundTrace("unused")
    stamps = {"start": 1.0, "stopped": 1.0, "written": 1.0004, "resumed": 1.0004, "replied": 1.0016,
              "final_stop": 1.0016}
    # Four rounds: 1200 us from go to reply, of which the worker's parts are 4 x (prep + pre + call + post).
    rounds = [{"r": r, "t": 150_000, "pre": 0, "post": 50_000, "prep": 0 if r == 0 else 40_000} for r in range(4)]
    trace.exchange("candidate", [0, 1, 2, 3], stamps, {}, {"op": "block", "rounds": rounds})
    line = trace.lines[0]
    assert line["prep_us"] == [0.0, 40.0, 40.0, 40.0]
    blocks = mod.summarize([line], skip=0)["correctness_blocks"]
    cand = blocks["candidate"]
    assert "reference" not in blocks and cand["blocks"] == 1 and cand["rounds"] == 4
    assert cand["write"] == pytest.approx(100.0) and cand["go"] == pytest.approx(300.0)
    assert (cand["prep"], cand["call"], cand["post"]) == (pytest.approx(30.0), 150.0, 50.0)
    assert cand["rest"] == pytest.approx(300.0 - 30.0 - 150.0 - 50.0)
    lone = {"role": "candidate", "rounds": [5], "block": False, "counted": True, "call_us": 1.0}
    assert mod.summarize([lone], skip=0)["correctness_blocks"] is None


def test_a_judge_writes_its_trace_where_the_operator_asks(data_dir, build_pool, tmp_path, monkeypatch):
    monkeypatch.setenv(ROUND_TRACE_ENV, str(tmp_path))
    cfg = ScoreConfig(num_correctness_inputs=20, timing_budget_s=0.3, min_timed_rounds=10, timing_protocol="lone")
    r = score(as_task(str(data_dir / "task_scale.py")), as_candidate(str(data_dir / "cand_same.py")), cfg,
              build_pool=build_pool)
    assert r.verdict is Verdict.OK, r.detail
    files = list(tmp_path.glob("rounds-*.jsonl"))
    assert len(files) == 1, os.listdir(tmp_path)
    lines = [json.loads(x) for x in files[0].read_text().splitlines()]
    lone = [x for x in lines if not x["block"]]
    timed = {x["rounds"][0] for x in lone if x["rounds"][0] >= cfg.warmup_rounds}
    assert len(timed) >= r.evidence.timing.rounds
    assert {x["role"] for x in lines} == {"reference", "candidate"}
    assert all(x["call_us"] > 0 and x["go_us"] >= x["call_us"] for x in lone)
    res = _summary_module().summarize(lines, skip=cfg.warmup_rounds)
    assert res["timed_pairs"] >= r.evidence.timing.rounds
    blocks = [x for x in lines if x["block"]]  # correctness blocks: each call's preparation reported
    assert blocks and all(x["prep_us"][0] == 0.0 and len(x["prep_us"]) == len(x["rounds"]) for x in blocks)
    assert res["correctness_blocks"]["candidate"]["blocks"] == len([x for x in blocks if x["role"] == "candidate"])


def test_the_clock_read_before_a_batch_goes_into_its_exchanges_lines():
    trace = RoundTrace("unused")
    readings = iter([{"sm_mhz": 1980, "clock_reasons": 0}, {"sm_mhz": 1755, "clock_reasons": 4}])
    trace.exchange("reference", [0], {"start": 0.0}, {}, {"op": "round", "t": 1, "pre": 0})
    trace.clock_reader = lambda: next(readings)
    trace.sample_clock()
    trace.exchange("reference", [1], {"start": 1.0}, {}, {"op": "round", "t": 1, "pre": 0})
    trace.exchange("candidate", [1], {"start": 2.0}, {}, {"op": "round", "t": 1, "pre": 0})
    trace.sample_clock()
    trace.exchange("reference", [2], {"start": 3.0}, {}, {"op": "round", "t": 1, "pre": 0})
    first, *rest = trace.lines
    assert "sm_mhz" not in first  # no reader yet (a CPU, or no NVML): no clock in the line
    assert [(x["sm_mhz"], x["clock_reasons"]) for x in rest] == [(1980, 0), (1980, 0), (1755, 4)]
