"""Task facts: what a judge measured about its task, handed to the next judge of the same task."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from evalfarm.judge import memory_plan
from evalfarm.judge.memory_plan import GB, MemoryGate, TaskTooLarge
from evalfarm.judge.task_facts import FOOTPRINT_FIELDS, TaskFacts, task_key, valid_footprint
from evalfarm.tasks.format import instantiate_task
from evalfarm.tasks.suite import kernelbench_suite

KB = Path(__file__).parent / "data" / "kernelbench_mini"
FP = {"input_bytes": 4 << 20, "weight_bytes": 0, "output_bytes": 4 << 20, "call_peak_bytes": 8 << 20}


def _evidence(**fp: object) -> dict:
    return {"footprint": {**FP, "measured": True, **fp}, "run_bytes": 1, "fits": True}


def test_the_key_is_the_task_its_profiles_and_the_kind_of_device() -> None:
    key = task_key("src", {"small": {"N": 4}}, "auto", "cuda:0")
    assert key == task_key("src", {"small": {"N": 4}}, "auto", "cuda:3")
    assert key != task_key("src2", {"small": {"N": 4}}, "auto", "cuda:0")
    assert key != task_key("src", {"small": {"N": 5}}, "auto", "cuda:0")
    assert key != task_key("src", {"small": {"N": 4}}, "small", "cuda:0")
    assert key != task_key("src", {"small": {"N": 4}}, "auto", "cpu")


@pytest.mark.parametrize("bad", [
    None, "x", {}, {**FP}, {**FP, "measured": False}, {**FP, "measured": 1},
    {**FP, "measured": True, "input_bytes": -1}, {**FP, "measured": True, "output_bytes": 1.5},
    {**FP, "measured": True, "weight_bytes": True}, {"measured": True, "input_bytes": 1},
])
def test_only_a_measured_footprint_of_byte_counts_is_taken(bad: object) -> None:
    assert valid_footprint(bad) is None


def test_facts_kept_per_task_and_only_byte_counts() -> None:
    facts = TaskFacts()
    facts.note("a", _evidence(extra_field="seed-like"))
    got = facts.get("a")
    assert got == {"footprint": {**FP, "measured": True}}
    assert set(got["footprint"]) == {*FOOTPRINT_FIELDS, "measured"}
    got["footprint"]["input_bytes"] = 0  # a copy: the store is not changed through it
    assert facts.get("a")["footprint"]["input_bytes"] == FP["input_bytes"]
    assert facts.get("b") == {}
    assert (facts.hits, facts.misses) == (2, 1)


def test_a_result_without_a_measured_footprint_adds_nothing() -> None:
    facts = TaskFacts()
    for evidence in ({}, None, {"footprint": {**FP, "measured": False}}, {"footprint": "x"}):
        facts.note("a", evidence)
    assert len(facts) == 0 and facts.get("a") == {}


def test_the_store_keeps_the_most_recently_used_tasks() -> None:
    facts = TaskFacts(max_tasks=2)
    facts.note("a", _evidence())
    facts.note("b", _evidence())
    facts.get("a")  # used: "b" is now the oldest
    facts.note("c", _evidence())
    assert facts.get("a") and facts.get("c") and facts.get("b") == {}
    with pytest.raises(ValueError):
        TaskFacts(max_tasks=0)


def _enabled_gate(monkeypatch: pytest.MonkeyPatch, free: int) -> MemoryGate:
    gate = MemoryGate(torch.device("cpu"))
    gate.enabled = True  # the CUDA path, with the device's free memory given here
    monkeypatch.setattr(memory_plan, "device_memory", lambda device: (free, 80 * 10**9))
    return gate


def test_a_known_footprint_replaces_the_shape_only_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_meta(*args: object) -> None:
        raise AssertionError("the meta-device pass ran although the footprint was known")

    gate = _enabled_gate(monkeypatch, 70 * 10**9)
    monkeypatch.setattr(memory_plan, "meta_footprint", no_meta)
    module = instantiate_task(kernelbench_suite(KB).load("L1/1"), "default")
    gate.before_setup(module, [], valid_footprint({**FP, "measured": True}))
    assert gate.footprint is not None and gate.footprint.measured
    assert gate.footprint.input_bytes == FP["input_bytes"]
    ev = gate.evidence()
    assert ev["fits"] and ev["planned_from"] == "measured by an earlier evaluation of this task"


def test_without_one_the_footprint_is_estimated_from_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = _enabled_gate(monkeypatch, 70 * 10**9)
    module = instantiate_task(kernelbench_suite(KB).load("L1/1"), "default")
    gate.before_setup(module, list(module.get_init_inputs()))
    assert gate.footprint is not None and not gate.footprint.measured
    assert gate.evidence()["planned_from"] == "estimated from shapes"


def test_a_known_footprint_too_large_for_the_device_is_still_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = _enabled_gate(monkeypatch, 2 * 10**9)
    module = instantiate_task(kernelbench_suite(KB).load("L1/1"), "default")
    huge = {**FP, "input_bytes": int(10 * GB), "output_bytes": int(10 * GB)}
    with pytest.raises(TaskTooLarge, match="task_too_large"):
        gate.before_setup(module, [], valid_footprint({**huge, "measured": True}))


@pytest.mark.gpu
def test_the_second_evaluation_of_a_task_plans_from_the_first_ones_footprint(data_dir: Path) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    from evalfarm.config import ScoreConfig
    from evalfarm.judge.standby import WarmJudges
    from evalfarm.scoring import score

    cfg = ScoreConfig(device="cuda", num_correctness_inputs=20, timing_budget_s=0.5)
    judges = WarmJudges({})
    try:
        first = score(data_dir / "gpu" / "task_relu.py", data_dir / "gpu" / "cand_same.py", cfg, judges=judges)
        second = score(data_dir / "gpu" / "task_relu.py", data_dir / "gpu" / "cand_same.py", cfg, judges=judges)
    finally:
        judges.close()
    assert first.ok and second.ok, (first.detail, second.detail)
    assert first.evidence.memory["planned_from"] == "estimated from shapes"
    assert second.evidence.memory["planned_from"] == "measured by an earlier evaluation of this task"
    assert second.evidence.memory["footprint"]["input_bytes"] == first.evidence.memory["footprint"]["input_bytes"]
    assert len(judges.task_facts) == 1
