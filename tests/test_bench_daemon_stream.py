"""The daemon benchmark's stream with KernelBench tasks, its generated variants, and the figures the
farm's throughput target is stated in (pure parts; the run through a real daemon is a long test)."""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from evalfarm import bench_daemon as bd
from evalfarm.result import Evidence, ScoreResult, TimingEvidence
from evalfarm.tasks.format import exec_module, instantiate_task
from evalfarm.verdict import Verdict
from tests.sandbox_under_test import DAEMON_ARGS

SCALE = """\
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        return x * 2.0 + 1.0

batch_size = 4
dim = 8

def get_inputs():
    return [torch.rand(batch_size, dim)]

def get_init_inputs():
    return []
"""

LINEAR_RELU = """\
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super(Model, self).__init__()
        self.gemm = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.gemm(x))

batch_size = 3
in_features = 5
out_features = 7

def get_inputs():
    return [torch.randn(batch_size, in_features)]

def get_init_inputs():
    return [in_features, out_features]
"""

# A tuple output with an integer tensor in it: the wrong variant must change both.
MAX_ARGMAX = """\
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        return x.max(dim=1).values, x.argmax(dim=1)

def get_inputs():
    return [torch.randn(4, 6)]

def get_init_inputs():
    return []
"""


@pytest.fixture
def kb_root(tmp_path: Path) -> Path:
    """A tiny KernelBench checkout: <root>/KernelBench/level<L>/<id>_<Name>.py."""
    for rel, text in (("level1/1_Scale.py", SCALE), ("level1/2_MaxArgmax.py", MAX_ARGMAX),
                      ("level2/3_Linear_ReLU.py", LINEAR_RELU)):
        path = tmp_path / "kb" / "KernelBench" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path / "kb"


KB_NAMES = ["level1/1_Scale.py", "level2/3_Linear_ReLU.py"]


# -- the stream ---------------------------------------------------------------------------------

def test_kernelbench_tasks_take_turns_with_the_builtin_ones_and_are_named_for_the_daemons_root(kb_root):
    stream = bd.build_stream("cpu", 12, 3, ["L1/1", "L1/2"], kb_root, KB_NAMES)
    tasks = [it.task for it in stream]
    assert tasks == (["L1/1"] * 3 + ["KB level1/1_Scale"] * 3 + ["L1/2"] * 3 + ["KB level2/3_Linear_ReLU"] * 3)
    kb = [it for it in stream if it.suite == "kernelbench"]
    assert {it.wire for it in kb} == {"L1/1", "L2/3"}  # resolved in the daemon's --kernelbench-root
    assert [it.kind for it in kb[:3]] == ["identical", "wrong", "slow"]
    # built-in tasks are sent with the prefix that keeps them built-in on a daemon with a KernelBench root
    assert {it.wire for it in stream if it.suite == "builtin"} == {"builtin:L1/1", "builtin:L1/2"}
    assert len({it.source for it in stream}) == 12 and all("class ModelNew" in it.source for it in stream)
    # the request names the task with its reference's hash: a daemon with another task of that name refuses it
    ref = kb[0].task_ref()
    assert ref.name == "L1/1" and ref.sha256 == hashlib.sha256(SCALE.encode()).hexdigest()
    assert stream[0].task_ref().name == "builtin:L1/1" and len(stream[0].task_ref().sha256) == 64


def test_builtin_tasks_get_a_generated_slow_variant_after_their_own():
    items = bd.builtin_task_items("cpu", ["L1/2"])[0]
    assert [it.kind for it in items][-2:] == ["identical", "slow"]
    assert {"fast", "wrong"} <= {it.kind for it in items}
    stream = bd.build_stream("cpu", len(items), len(items), ["L1/2"])
    assert [it.kind for it in stream] == [it.kind for it in items]


def test_a_stream_of_kernelbench_tasks_alone(kb_root):
    stream = bd.build_stream("cuda", 5, 2, None, kb_root, ["level1/1_Scale"], builtin=False)
    assert {it.suite for it in stream} == {"kernelbench"} and len(stream) == 5
    assert [it.kind for it in stream] == ["identical", "wrong", "identical", "wrong", "identical"]


def test_unknown_kernelbench_problems_and_roots_are_refused(kb_root, tmp_path):
    with pytest.raises(SystemExit, match="no KernelBench problem 'level1/9_Nope.py'"):
        bd.build_stream("cpu", 4, 2, None, kb_root, ["level1/9_Nope.py"])
    with pytest.raises(SystemExit, match="no KernelBench problem '1_Scale.py'"):  # the level is part of the name
        bd.build_stream("cpu", 4, 2, None, kb_root, ["1_Scale.py"])
    with pytest.raises(SystemExit, match="--kernelbench-root"):
        bd.build_stream("cpu", 4, 2, None, tmp_path / "empty", ["level1/1_Scale.py"])
    with pytest.raises(SystemExit, match="needs a KernelBench checkout"):
        bd.build_stream("cpu", 4, 2, None, None, ["level1/1_Scale.py"])


def test_kernelbench_items_run_at_their_own_sizes():
    options = {"num_correctness_inputs": 20, "size_profile": "small"}
    kb = bd.StreamItem("KB level1/1_Scale", "slow", "slow", "", "kernelbench", "L1/1")
    builtin = bd.StreamItem("L1/1", "identical", "identical", "", "builtin", "builtin:L1/1")
    assert bd.item_options(kb, options) == {"num_correctness_inputs": 20}
    assert bd.item_options(builtin, options) == options and options["size_profile"] == "small"


def test_the_kernelbench_choice(kb_root, monkeypatch):
    monkeypatch.setattr(bd, "DEFAULT_KERNELBENCH_ROOT", kb_root)
    assert bd.kernelbench_choice("cuda", None, None, False) == (kb_root, list(bd.KB_TASKS_DEFAULT["cuda"]))
    assert bd.kernelbench_choice("cpu", None, None, False) == (kb_root, list(bd.KB_TASKS_DEFAULT["cpu"]))
    assert bd.kernelbench_choice("cpu", None, None, True) == (kb_root, [])  # --tasks named built-in tasks
    assert bd.kernelbench_choice("cpu", None, "level1/1_Scale.py, level2/3_Linear_ReLU.py", True) == (kb_root, KB_NAMES)
    assert bd.kernelbench_choice("cpu", "none", None, False) == (None, [])
    assert bd.kernelbench_choice("cpu", None, "none", False) == (kb_root, [])
    monkeypatch.setattr(bd, "DEFAULT_KERNELBENCH_ROOT", kb_root / "missing")
    assert bd.kernelbench_choice("cuda", None, None, False) == (None, [])
    with pytest.raises(SystemExit, match="needs a KernelBench checkout"):
        bd.kernelbench_choice("cuda", None, "level1/1_Scale.py", False)


def test_the_default_kernelbench_problems_exist_where_the_checkout_is():
    if not (bd.DEFAULT_KERNELBENCH_ROOT / "KernelBench").is_dir():
        pytest.skip(f"no KernelBench checkout at {bd.DEFAULT_KERNELBENCH_ROOT}")
    names = sorted(set(bd.KB_TASKS_DEFAULT["cuda"]) | set(bd.KB_TASKS_DEFAULT["cpu"]))
    per_task = bd.kernelbench_task_items(bd.DEFAULT_KERNELBENCH_ROOT, names)
    assert len(per_task) == len(names)
    assert {n.split("/")[0] for n in bd.KB_TASKS_DEFAULT["cuda"]} == {"level1", "level2"}


# -- the generated variants, run ------------------------------------------------------------------

_mods = itertools.count()


def _outputs(source: str, cls: str, init: list, inputs: list):
    module = exec_module(source, f"bench_variant_{next(_mods)}", "variant.py")
    torch.manual_seed(1)  # the same parameters for the reference and every variant
    model = getattr(module, cls)(*init)
    with torch.no_grad():
        return model(*inputs)


def _flat(out) -> list[torch.Tensor]:
    return list(out) if isinstance(out, tuple | list) else [out]


def _close(a, b) -> bool:
    return all(x.dtype == y.dtype and torch.allclose(x.double(), y.double(), rtol=1e-4, atol=0)
               for x, y in zip(_flat(a), _flat(b), strict=True))


@pytest.mark.parametrize("ref", [SCALE, LINEAR_RELU, MAX_ARGMAX], ids=["scale", "linear_relu", "tuple_with_ints"])
def test_identical_and_slow_compute_the_reference_and_wrong_does_not(ref):
    module = exec_module(ref, f"bench_ref_{next(_mods)}", "ref.py")
    torch.manual_seed(0)
    inputs, init = module.get_inputs(), module.get_init_inputs()
    want = _outputs(ref, "Model", init, inputs)
    for make in (bd.identical_source, bd.slow_source):
        got = _outputs(make(ref), "ModelNew", init, inputs)
        assert all(torch.equal(x, y) for x, y in zip(_flat(got), _flat(want), strict=True)), make.__name__
    wrong = _outputs(bd.wrong_source(ref), "ModelNew", init, inputs)
    assert _close(want, want) and not _close(wrong, want)
    for w, r in zip(_flat(wrong), _flat(want), strict=True):  # every tensor of the output is off
        assert not torch.equal(w, r)
        if r.is_floating_point():  # 1% off: far outside a 1e-4 relative L2 tolerance
            assert (torch.linalg.vector_norm(w - r) / torch.linalg.vector_norm(r)).item() == pytest.approx(0.01, rel=1e-3)


def test_slow_does_the_forward_twice():
    calls = []
    module = exec_module(bd.slow_source(SCALE), f"bench_slow_{next(_mods)}", "slow.py")
    model = module.ModelNew()
    model.register_forward_hook(lambda *a: calls.append("module"))  # once per call of the module itself
    original = module.Model.forward
    module.Model.forward = lambda self, x: (calls.append("reference forward"), original(self, x))[1]
    model(torch.ones(2, 3))
    assert calls.count("reference forward") == 2 and calls.count("module") == 1


def test_generated_variants_of_a_builtin_task_at_its_small_size():
    from evalfarm.tasks import builtin_suite

    task = builtin_suite().load("L1/2")
    module = instantiate_task(task, "small")
    torch.manual_seed(0)
    inputs = module.get_inputs()
    want = _outputs(task.source, "Model", [], inputs)
    assert torch.equal(_outputs(bd.slow_source(task.source), "ModelNew", [], inputs), want)
    assert torch.equal(_outputs(bd.identical_source(task.source), "ModelNew", [], inputs), want)
    assert not _close(_outputs(bd.wrong_source(task.source), "ModelNew", [], inputs), want)


# -- per-row figures ------------------------------------------------------------------------------

def test_slot_seconds_are_the_evaluation_less_its_build_and_gpu_lease_waits():
    fig = bd.slot_figures({"total": 10.0, "build": 2.0, "gpu_lease_wait": 1.5, "rounds_calls": 3.0, "timing": 4.0})
    assert fig == {"slot_s": 6.5, "work_s": 3.0, "overhead_s": 3.5}
    assert bd.slot_figures({"total": 4.0, "rounds_calls": 0.5}) == {"slot_s": 4.0, "work_s": 0.5, "overhead_s": 3.5}
    # no total (an evaluation that did not run to its end): no slot seconds, the work where given
    assert bd.slot_figures({"rounds_calls": 0.5}) == {"slot_s": None, "work_s": 0.5, "overhead_s": None}
    assert bd.slot_figures({"total": 1.0}) == {"slot_s": 1.0, "work_s": None, "overhead_s": None}


def test_recheck_marks_come_from_the_evidence():
    none = bd.recheck_marks({}, {}, {"total": 1.0}, "")
    assert none == {"reverified": None, "reverify_where": None, "reverify_s": None, "other_sizes": None,
                    "other_sizes_ran": False, "other_sizes_s": None}
    rv = bd.recheck_marks({"status": "agreed", "where": "same daemon: no other daemon with this device model",
                           "seconds": 2.5}, {}, {}, "")
    assert rv["reverified"] == "agreed" and rv["reverify_where"].startswith("same daemon") and rv["reverify_s"] == 2.5
    assert bd.recheck_marks({"status": "agreed", "seconds": None}, {}, {}, "")["reverify_s"] is None
    assert bd.recheck_marks({}, {}, {}, "x; re-verification disagreed: 4x on a, 3x on b")["reverified"] == "unknown"
    assert bd.recheck_marks({}, {}, {"reverify": 2.0}, "")["reverified"] == "unknown"
    ran = bd.recheck_marks({}, {"profile": "small", "status": "ok", "verdict": "OK", "seconds": 1.2},
                           {"other_sizes": 1.25}, "")
    assert ran["other_sizes"] == "ok" and ran["other_sizes_ran"] and ran["other_sizes_s"] == 1.25
    # a check that could not apply (no other size): recorded, but no second evaluation ran
    na = bd.recheck_marks({}, {"profile": None, "status": "not_applicable", "verdict": None}, {}, "")
    assert na["other_sizes"] == "not_applicable" and not na["other_sizes_ran"] and na["other_sizes_s"] is None


def test_a_result_row_carries_its_figures():
    ev = Evidence(phases_s={"total": 8.0, "build": 1.0, "rounds_calls": 2.0, "other_sizes": 0.75},
                  timing=TimingEvidence(ref_time_us_median=25.0, cand_time_us_median=12.5, rounds=100,
                                        pre_call_charge_us=3.0, exchange_charge_us=4.0),
                  reverified={"status": "disagreed", "where": "another daemon with the same device model"},
                  other_sizes={"profile": "small", "status": "ok", "verdict": "OK", "seconds": 0.7})
    res = SimpleNamespace(sample_id="bench-3", result=ScoreResult(verdict=Verdict.OK, speedup=2.0, evidence=ev))
    it = bd.StreamItem("KB level1/1_Scale", "slow", "slow", "", "kernelbench", "L1/1")
    row = bd.result_row(it, res, 12.0)
    assert row["task"] == "KB level1/1_Scale" and row["suite"] == "kernelbench" and row["kind"] == "slow"
    assert (row["slot_s"], row["work_s"], row["overhead_s"]) == (7.0, 2.0, 5.0)
    assert row["ref_time_us"] == 25.0 and row["cand_time_us"] == 12.5 and row["timed_rounds"] == 100
    assert row["pre_call_charge_us"] == 3.0 and row["exchange_charge_us"] == 4.0
    assert row["reverified"] == "disagreed" and row["other_sizes_ran"] and row["other_sizes_s"] == 0.75
    json.dumps(row)  # written to the JSON as it is


# -- the summary ----------------------------------------------------------------------------------

def _sampler(slots: int | None = 2, util: list[float] | None = None) -> bd.Sampler:
    sampler = bd.Sampler.__new__(bd.Sampler)
    sampler.queue, sampler.util, sampler.util_per_gpu = [(0.0, 5, 2)], list(util or []), []
    sampler.slots, sampler.gpu_model = slots, "NVIDIA H200"
    return sampler


def _row(kind: str, slot: float | None, work: float | None, verdict: str = "OK", **kw) -> dict:
    phases = {} if slot is None else {"total": slot + 1.0, "build": 1.0}
    if work is not None:
        phases["rounds_calls"] = work
    return {"kind": kind, "verdict": verdict, "latency_s": 1.0, "phases_s": phases, "build_s": 0.0,
            "speedup": kw.pop("speedup", None), **bd.slot_figures(phases),
            **bd.recheck_marks(kw.pop("reverified", {}), kw.pop("other_sizes", {}), phases, ""), **kw}


def _rows() -> list[dict]:
    rows = [_row("fast", 2.0 + i, 1.0, speedup=2.0) for i in range(4)]  # slot 2..5, work 1
    rows += [_row("wrong", 1.0, 0.1, "INCORRECT"), _row("identical", 3.0, 2.0, speedup=1.0),
             _row("slow", 6.0, 4.0, speedup=0.5), _row("fast", None, None, "INFRA_ERROR")]
    rows[0].update(reverified="agreed", reverify_s=3.0)
    rows[1].update(reverified="disagreed", reverify_s=1.0)
    rows[2].update(other_sizes="ok", other_sizes_ran=True, other_sizes_s=0.5)
    rows[3].update(other_sizes="failed", other_sizes_ran=True, other_sizes_s=1.5)
    rows[4].update(other_sizes="not_applicable", other_sizes_ran=False, other_sizes_s=None)
    return rows


def test_throughput_figures_from_synthetic_rows():
    rows = _rows()  # 8 candidates; slot seconds 2, 3, 4, 5, 1, 3, 6 (the INFRA_ERROR has none)
    fig = bd.throughput_figures(rows, 1800.0, 2)
    assert fig["candidates_per_slot_hour"] == 8.0  # 8 / (0.5 h x 2 slots)
    assert fig["slot_s_median"] == 3.0 and fig["slot_s_p95"] == 6.0
    assert fig["work_s_median"] == 1.0  # works 1, 1, 1, 1, 0.1, 2, 4
    assert fig["overhead_s_median"] == 2.0 and fig["overhead_s_p95"] == 4.0  # 1, 2, 3, 4, 0.9, 1, 2
    assert fig["slot_over_work"] == 3.0
    assert bd.throughput_figures([], 10.0, 1)["candidates_per_slot_hour"] is None
    assert bd.throughput_figures(rows, 10.0, None)["candidates_per_slot_hour"] is None


def test_rechecks_are_counted_with_their_seconds():
    rc = bd.recheck_counts(_rows())
    assert rc["reverified"] == 2 and rc["reverified_status"] == {"agreed": 1, "disagreed": 1}
    assert rc["reverify_s_total"] == 4.0 and rc["reverify_s_median"] == 2.0
    assert rc["other_sizes"] == 2 and rc["other_sizes_failed"] == 1  # not_applicable ran no check
    assert rc["other_sizes_s_total"] == 2.0 and rc["other_sizes_s_median"] == 1.0
    assert bd.recheck_counts([_row("fast", 1.0, 0.5)])["other_sizes_s_total"] is None


def test_task_windows_are_counted_from_the_evidence():
    rows = _rows()
    rows[0]["task_window"] = {"index": 1, "max_candidates": 16, "shared_setup": False, "setup_spared_s": 0.0,
                              "reference_memo": {"rounds_reused": 0, "rounds_kept": 995}}
    rows[1]["task_window"] = {"index": 2, "max_candidates": 16, "shared_setup": True, "setup_spared_s": 1.25,
                              "reference_memo": {"rounds_reused": 995, "rounds_kept": 995}}
    rows[2]["task_window"] = {"index": 3, "max_candidates": 16, "shared_setup": True, "setup_spared_s": 0.5,
                              "reference_memo": {"rounds_reused": 12, "rounds_kept": 995}}
    assert bd.window_counts(rows) == {"in_window": 3, "shared_setup": 2, "setup_spared_s": 1.75,
                                      "reference_rounds_reused": 1007, "reference_memo_off": []}
    text = bd.markdown(bd.summarise(rows, 60.0, _sampler(1), [], "cpu"))
    assert ("Task windows: 3 of 8 candidates scored by a judge serving its task's window, 2 with the task's "
            "set-up from an earlier candidate (1.75 s of set-up spared in all); 1007 correctness rounds "
            "checked against kept reference outputs.") in text
    for w in rows[0]["task_window"], rows[1]["task_window"], rows[2]["task_window"]:
        w["reference_memo"] = {"off": "the workers are not in bubblewrap"}
    assert "(none kept: the workers are not in bubblewrap)." in bd.markdown(
        bd.summarise(rows, 60.0, _sampler(1), [], "cpu"))
    assert "Task windows" not in bd.markdown(bd.summarise(_rows(), 60.0, _sampler(1), [], "cpu"))


def test_targets_beside_the_measured_values():
    fig = {"slot_s_median": 1.7, "work_s_median": 1.0}
    cv = [{"task": "a", "variant": "v", "speedups": [1.0, 1.01], "cv": 0.004, "ref_time_us": 25.0},
          {"task": "b", "variant": "v", "speedups": [1.0, 2.0], "cv": 0.33, "ref_time_us": 5.0}]  # under 20 us
    t = bd.target_checks(fig, 0.72, cv)
    assert t["slot"] == {"median_s": 1.7, "bound_s": pytest.approx(1.8), "met": True}
    assert t["gpu_busy"]["met"] is True and t["reward_cv"] == {"rows": 1, "worst": 0.004, "met": True}
    t = bd.target_checks({"slot_s_median": 1.9, "work_s_median": 1.0}, 0.5,
                         [{**cv[0], "cv": 0.006}, cv[1]])
    assert t["slot"]["met"] is False and t["gpu_busy"]["met"] is False and t["reward_cv"]["met"] is False
    t = bd.target_checks({"slot_s_median": None, "work_s_median": None}, None, [cv[1]])
    assert t["slot"]["met"] is None and t["gpu_busy"]["met"] is None and t["reward_cv"]["met"] is None


def test_pick_rescore_takes_fast_variants_then_identical_copies():
    items = [bd.StreamItem("L1/1", "f1.py", "fast", "a"), bd.StreamItem("L1/1", "f1.py", "fast", "b"),
             bd.StreamItem("L1/1", "identical", "identical", "c"), bd.StreamItem("KB x", "identical", "identical", "d"),
             bd.StreamItem("KB x", "slow", "slow", "e"), bd.StreamItem("L1/2", "f2.py", "fast", "f")]
    assert [(p.task, p.variant) for p in bd.pick_rescore(items, 5)] == [
        ("L1/1", "f1.py"), ("L1/2", "f2.py"), ("KB x", "identical")]
    assert len(bd.pick_rescore(items, 1)) == 1
    row = bd.cv_row(items[0], [2.0, 2.0], [30.0, 40.0, 20.0])
    assert row["cv"] == 0.0 and row["ref_time_us"] == 30.0
    assert bd.cv_row(items[0], [2.0], [])["cv"] is None


def test_the_table_shows_the_target_figures():
    cv = [{"task": "KB level1/12_Matmul", "variant": "identical", "speedups": [1.0, 1.02], "cv": 0.0099,
           "ref_time_us": 31.5}]
    s = bd.summarise(_rows(), 1800.0, _sampler(2, [80.0, 60.0]), cv, "cuda")
    s.update(serve_args=["--task-window", "8"], tasks=["L1/1", "KB level1/12_Matmul"], other_sizes=True)
    text = bd.markdown(s)
    lines = text.splitlines()
    assert lines[0].endswith("tasks L1/1,KB level1/12_Matmul, serve args --task-window 8)")
    assert "other-size checks on" in lines[0]
    assert lines[2].startswith("| candidates/min") and lines[8].startswith("Median seconds per phase")
    assert "| candidates/GPU-h | slot s median |" in text
    assert "| 8.0 | 3.00 | 6.00 | 1.000 | 2.00 | 4.00 | 3.0 | 70% |" in text
    target = next(line for line in lines if line.startswith("Targets:"))
    assert "3.00 s against 1.3 x 1.00 + 0.5 = 1.80 s, NOT met" in target
    assert "GPU busy >= 70%: 70%, met" in target and "worst 0.99% over 1 row(s), NOT met" in target
    assert ("Re-checks: 2 re-verified (agreed 1, disagreed 1) (4.00 s in all, median 2.00 s); "
            "2 checked at another size (1 failed, "
            "2.00 s in all, median 1.00 s).") in text
    assert "| fast | 5 | INFRA_ERROR 1, OK 4 | 3.50 | 1.000 | 2.50 | 2.00 |" in text
    assert "| slow | 1 | OK 1 | 6.00 | 4.000 | 2.00 | 0.50 |" in text
    assert "| KB level1/12_Matmul | identical | 31.5 | 1.00, 1.02 | 0.99% |" in text
    cpu = bd.markdown(bd.summarise(_rows(), 1800.0, _sampler(1), [], "cpu"))
    assert "| candidates/slot-h |" in cpu and "GPU busy >= 70%: -, not measured" in cpu


# -- through a real daemon ------------------------------------------------------------------------

@pytest.mark.long
def test_kernelbench_tasks_and_serve_args_through_a_real_daemon(kb_root, tmp_path):
    out = tmp_path / "out"
    assert bd.main(["--device", "cpu", "--tasks", "L1/2", "--kernelbench-root", str(kb_root), "--kb-tasks",
                    "level2/3_Linear_ReLU.py", "--candidates", "6", "--group", "3", "--rescore", "1",
                    "--repeats", "2", "--serve-arg=--build-workers", "--serve-arg=1", "--out", str(out),
                    *DAEMON_ARGS]) == 0
    data = json.loads((out / "bench_daemon.json").read_text())
    s, rows = data["summary"], data["rows"]
    assert s["serve_args"] == ["--build-workers", "1"] and s["kb_tasks"] == ["KB level2/3_Linear_ReLU"]
    assert s["kernelbench_root"] == str(kb_root) and s["candidates"] == 6
    kb = {r["kind"]: r for r in rows if r["suite"] == "kernelbench"}
    assert kb["identical"]["verdict"] == "OK" and kb["slow"]["verdict"] == "OK", kb
    assert kb["wrong"]["verdict"] == "INCORRECT", kb["wrong"]
    assert all(r["slot_s"] is not None and r["work_s"] is not None for r in rows), rows
    assert s["candidates_per_slot_hour"] and s["slot_s_median"] and s["targets"]["slot"]["met"] is not None
    assert len(s["reward_cv"]) == 1 and s["reward_cv"][0]["ref_time_us"]
    text = (out / "bench_daemon.md").read_text()
    assert "serve args --build-workers 1" in text.splitlines()[0] and "Targets:" in text
