"""A task window's kept reference outputs (evalfarm.judge.reference_memo): the correctness blocks'
inputs drawn from the window's secret, the reference run once per round and window, and every
later candidate still checked against the reference's outputs of its own inputs."""

from __future__ import annotations

import dataclasses
import types
from pathlib import Path

import pytest
import torch

from evalfarm import ScoreConfig, Verdict
from evalfarm.judge import precision
from evalfarm.judge.inputs import InputSource
from evalfarm.judge.reference_memo import (
    DEFAULT_BUDGET_BYTES,
    REFERENCE_MEMO_ENV,
    ReferenceMemo,
    budget_bytes,
)
from evalfarm.judge.setup import inputs_not_repeatable, same_outputs
from evalfarm.judge.standby import WarmJudges
from evalfarm.judge.task_window import WindowSpec
from evalfarm.scoring import as_candidate, as_task, score
from tests.sandbox_under_test import SANDBOX

QUICK = ScoreConfig(num_correctness_inputs=60, timing_budget_s=0.3, min_timed_rounds=21)
RUNTIME = Path(__file__).resolve().parent / "adversarial" / "runtime"
needs_strong_sandbox = pytest.mark.skipif(not SANDBOX.strong, reason="the memo is used in the strong sandbox only")


def test_the_budget_setting():
    assert budget_bytes("") == DEFAULT_BUDGET_BYTES
    assert budget_bytes("0") == 0
    assert budget_bytes(" 64 ") == 64 << 20
    for bad in ("-1", "1.5", "lots"):
        with pytest.raises(ValueError, match=REFERENCE_MEMO_ENV):
            budget_bytes(bad)


def test_kept_outputs_are_copies_within_the_budget():
    memo = ReferenceMemo(torch.device("cpu"), budget=96)
    out = torch.arange(16, dtype=torch.float32)  # 64 bytes
    assert memo.keep(3, "", [out], {"t": 1000, "strides": [[1]]})
    out.add_(1.0)  # the worker's slot is used again: the kept copy stays as it was
    kept = memo.get(3, "")
    assert kept is not None and torch.equal(kept.outputs[0], torch.arange(16, dtype=torch.float32))
    assert kept.times == {"t": 1000} and not kept.on_host
    assert memo.get(3, "widened") is None and memo.get(4, "") is None
    assert not memo.keep(3, "", [out], {"t": 1})  # kept once
    assert not memo.keep(4, "", [out], {"t": 1})  # over the budget (no host memory on a CPU)
    assert not memo.keep(5, "", [1.0], {"t": 1})  # not a tensor
    assert len(memo) == 1 and memo.evidence(2)["rounds_reused"] == 2


def _module() -> types.ModuleType:
    module = types.ModuleType("memo_task")
    module.get_inputs = lambda: [torch.rand(32)]  # type: ignore[attr-defined]
    module.get_init_inputs = lambda: []  # type: ignore[attr-defined]
    return module


def test_shared_rounds_draw_the_window_s_inputs_and_no_other_round_does():
    module, secret = _module(), b"w" * 32
    a, b = InputSource(module, "cpu"), InputSource(module, "cpu")
    for source in (a, b):
        source.share(secret, range(2, 6))
    for r in range(2, 6):
        assert torch.equal(a.inputs(r)[0], b.inputs(r)[0])
    for r in (0, 1, 6, 7, -1):  # warm-up, timed and set-up draws stay each source's own
        assert not torch.equal(a.inputs(r)[0], b.inputs(r)[0]), r
    spec = precision.WidenSpec(positions=(0,), symmetric=(False,))
    a.widen(spec, [3])
    assert a.widening(3) and not a.widening(4) and not b.widening(3)
    assert not torch.equal(a.inputs(3)[0], b.inputs(3)[0])  # widened: kept under another key
    b.widen(spec, [3])
    assert a.widening(3) == b.widening(3) and torch.equal(a.inputs(3)[0], b.inputs(3)[0])


def test_repeatable_outputs_are_the_same_bit_for_bit():
    x = torch.arange(6, dtype=torch.float32)
    assert same_outputs(x, x.clone()) and same_outputs((x, x + 1), [x.clone(), x + 1])
    assert not same_outputs(x, x + 1e-6)
    assert not same_outputs(x, x.double()) and not same_outputs((x,), (x, x))
    nan = torch.tensor([float("nan")])
    assert not same_outputs(nan, nan.clone())


def test_a_task_whose_draws_have_state_of_their_own_is_seen():
    assert inputs_not_repeatable(InputSource(_module(), "cpu")) == ""
    counting = _module()
    drawn = [0]

    def get_inputs():
        drawn[0] += 1
        return [torch.rand(32) + drawn[0]]

    counting.get_inputs = get_inputs  # type: ignore[attr-defined]
    assert "differed from one draw to the next" in inputs_not_repeatable(InputSource(counting, "cpu"))
    ints = _module()
    ints.get_inputs = lambda: [torch.rand(4), 7]  # type: ignore[attr-defined]
    assert inputs_not_repeatable(InputSource(ints, "cpu")) == ""


def _window(task, sources, config, build_pool):
    judges = WarmJudges({}, window=WindowSpec(len(sources) + 1, 30.0))
    try:
        return [score(task, as_candidate(str(s)), config, build_pool, judges=judges) for s in sources]
    finally:
        judges.close()


@needs_strong_sandbox
def test_a_window_runs_the_reference_once_per_round_and_still_catches_a_wrong_candidate(data_dir, build_pool,
                                                                                         monkeypatch):
    monkeypatch.setenv("EVALFARM_SANDBOX", "auto")
    task = as_task(str(data_dir / "task_scale.py"))
    first, wrong, again = _window(task, [data_dir / "cand_same.py", data_dir / "cand_wrong_after_12.py",
                                         data_dir / "cand_same.py"], QUICK, build_pool)
    assert first.verdict is Verdict.OK, first.detail
    memo = first.evidence.task_window["reference_memo"]
    assert memo["rounds_reused"] == 0 and memo["rounds_kept"] > 0, memo
    # Wrong from its 13th call: caught in a block round, against the kept reference outputs.
    assert wrong.verdict is Verdict.INCORRECT, (wrong.verdict, wrong.detail)
    assert wrong.evidence.task_window["index"] == 2 and wrong.evidence.task_window["reference_memo"]["rounds_reused"] > 0
    assert again.verdict is Verdict.OK, again.detail
    memo = again.evidence.task_window["reference_memo"]
    assert again.evidence.task_window["index"] == 3 and memo["rounds_reused"] == memo["rounds_kept"] > 0, memo
    assert 0.5 < again.speedup < 2.0


@needs_strong_sandbox
def test_the_precision_gate_holds_with_kept_outputs(data_dir, build_pool, monkeypatch):
    # Each candidate's gate draws its own rounds, some widened: an honest matmul before and after a
    # TF32-emulating one (within the tolerance, less precise than the reference) in one window.
    monkeypatch.setenv("EVALFARM_SANDBOX", "auto")
    task = as_task(str(data_dir / "task_matmul_rand.py"))
    config = dataclasses.replace(QUICK, num_correctness_inputs=40)
    honest, tf32, honest_again = _window(task, [data_dir / "cand_matmul_same.py", RUNTIME / "tf32_emulated_matmul.py",
                                                data_dir / "cand_matmul_same.py"], config, build_pool)
    assert honest.verdict is Verdict.OK and honest_again.verdict is Verdict.OK, (honest.detail, honest_again.detail)
    assert honest_again.evidence.task_window["reference_memo"]["rounds_reused"] > 0
    assert tf32.verdict is Verdict.INCORRECT and "less precise than the reference" in tf32.detail, tf32.detail


@pytest.mark.parametrize("sandbox, memo_setting, why", [
    ("builtin", "", "not in bubblewrap"),
    pytest.param("auto", "0", f"{REFERENCE_MEMO_ENV}=0", marks=needs_strong_sandbox),
])
def test_no_memo_where_files_may_cross_or_the_owner_says_so(data_dir, build_pool, monkeypatch, sandbox,
                                                           memo_setting, why):
    monkeypatch.setenv("EVALFARM_SANDBOX", sandbox)
    monkeypatch.setenv(REFERENCE_MEMO_ENV, memo_setting)
    task = as_task(str(data_dir / "task_scale.py"))
    results = _window(task, [data_dir / "cand_same.py"] * 2, QUICK, build_pool)
    for r in results:
        assert r.verdict is Verdict.OK, r.detail
        assert why in r.evidence.task_window["reference_memo"]["off"], r.evidence.task_window
    assert results[1].evidence.task_window["index"] == 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_outputs_beyond_the_device_budget_go_to_page_locked_host_memory():
    device = torch.device("cuda:0")
    memo = ReferenceMemo(device, budget=4096)
    memo.device_budget = 2048
    out = torch.arange(512, dtype=torch.float32, device=device)  # 2048 bytes
    assert memo.keep(1, "", [out], {"t": 5}) and memo.keep(2, "", [out * 2], {"t": 5})
    on_device, on_host = memo.get(1, ""), memo.get(2, "")
    assert on_device is not None and not on_device.on_host and on_device.outputs[0].is_cuda
    assert on_host is not None and on_host.on_host and on_host.outputs[0].is_pinned()
    back = memo.outputs_on_device(on_host)[0]
    assert back.is_cuda and torch.equal(back, out * 2)
    assert not memo.keep(3, "", [out], {"t": 5})  # both budgets full


# Its output depends on how often it was called: the two set-up calls differ, so no window keeps it.
COUNTING_TASK = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return x * 2.0 + min(self.calls, 1000)


def get_inputs():
    return [torch.randn(4096)]


def get_init_inputs():
    return []
'''


@needs_strong_sandbox
def test_a_reference_that_is_not_repeatable_is_run_for_every_candidate(build_pool, monkeypatch, tmp_path):
    monkeypatch.setenv("EVALFARM_SANDBOX", "auto")
    task_file, cand_file = tmp_path / "counting.py", tmp_path / "counting_copy.py"
    task_file.write_text(COUNTING_TASK)
    cand_file.write_text(COUNTING_TASK.replace("class Model(", "class ModelNew("))
    results = _window(as_task(str(task_file)), [cand_file] * 2, QUICK, build_pool)
    for r in results:
        assert r.verdict is Verdict.OK, r.detail  # its own reference beside it, call for call
        assert "different outputs" in r.evidence.task_window["reference_memo"]["off"], r.evidence.task_window
