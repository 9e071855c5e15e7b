"""The device-memory plan: a task's footprint from shapes alone, and a clear reason when it cannot fit."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalfarm.judge.memory_plan import (
    GB,
    Footprint,
    MemoryGate,
    meta_footprint,
    plan,
    rounds_bytes,
    rounds_that_fit,
    setup_bytes,
    warm_meta,
)
from evalfarm.tasks.format import instantiate_task
from evalfarm.tasks.suite import kernelbench_suite

KB = Path(__file__).parent / "data" / "kernelbench_mini"


def _footprint(task_id: str) -> Footprint:
    task = kernelbench_suite(KB).load(task_id)
    module = instantiate_task(task, "default")
    fp = meta_footprint(module, list(module.get_init_inputs()))
    assert fp is not None
    return fp


def test_full_size_task_is_planned_from_shapes_without_allocating_it():
    fp = _footprint("L1/2")  # 4096 x 393216 float32 in and out: 6.4 GB each, never allocated here
    assert fp.input_bytes == fp.output_bytes == 4096 * 393216 * 4
    assert fp.weight_bytes == 0 and not fp.measured


def test_weights_are_counted():
    fp = _footprint("L2/1")
    assert fp.weight_bytes == (32 * 16 + 16) * 4
    assert (fp.input_bytes, fp.output_bytes) == (8 * 32 * 4, 8 * 16 * 4)


def test_plan_says_how_much_is_needed_and_free():
    fp = _footprint("L1/2")
    h100 = plan(fp, free_bytes=int(79.1 * GB), total_bytes=int(79.6 * GB))
    assert h100.fits, h100.reason()
    # The same task on a device with 40 GB free: a reason with both numbers, no traceback.
    small = plan(fp, free_bytes=40 * 10**9, total_bytes=80 * 10**9)
    assert not small.fits and small.need_bytes > 40 * 10**9
    text = small.reason()
    assert text.startswith("task_too_large: the task needs ~")
    assert f"~{small.need_bytes / GB:.1f} GB" in text and "the device has 40.0 GB free (of 80.0 GB)" in text
    assert "inputs 6.44 GB, outputs 6.44 GB" in text


def test_more_rounds_per_batch_need_more():
    fp = _footprint("L1/1")
    one, many = (plan(fp, 1 << 40, 1 << 40, rounds_per_batch=k).run_bytes for k in (1, 32))
    assert many - one >= 31 * (3 * fp.input_bytes + 2 * fp.output_bytes)


def test_full_size_elementwise_task_fits_an_h100():
    # KernelBench L1/19..L1/37: 6.4 GB of input and as much output, a call's peak of one output.
    # The judge's probe holds at most two input sets and one output; the rounds are the peak.
    fp = _footprint("L1/2")
    fp.call_peak_bytes, fp.measured = fp.output_bytes, True
    assert setup_bytes(fp) == 3 * fp.input_bytes
    p = plan(fp, free_bytes=int(84.5 * GB), total_bytes=int(85.0 * GB))
    assert p.fits, p.reason()
    assert p.setup_bytes < p.run_bytes < 62 * GB


def test_reference_of_a_third_of_the_card_is_judged_against_everything_held():
    # KernelBench L1/38 (L1 norm of 8.6 GB): the reference alone needs ~26 GB (input, the abs()
    # temporary, the output). Two workers, four arenas, the judge's copy of the inputs and the
    # candidate's kept output do not fit 84.5 GB: a clear reason, not an out-of-memory crash.
    big = 8_589_934_592
    fp = Footprint(input_bytes=big, weight_bytes=0, output_bytes=big, call_peak_bytes=2 * big, measured=True)
    p = plan(fp, free_bytes=int(84.5 * GB), total_bytes=int(85.0 * GB))
    physical = 4 * big + big + 2 * (2 * big) + big  # four arenas, the judge's inputs, two calls, the kept output
    assert p.run_bytes > physical and not p.fits
    assert "task_too_large: the task needs ~" in p.reason()
    # the same task fits a card with 141 GB (an H200)
    assert plan(fp, free_bytes=140 * 10**9, total_bytes=141 * 10**9).fits


def test_a_tight_device_gets_fewer_rounds_per_batch():
    fp = Footprint(input_bytes=200 << 20, weight_bytes=0, output_bytes=200 << 20, call_peak_bytes=400 << 20)
    roomy = 1 << 40
    assert rounds_that_fit(fp, roomy, 32) == 32
    tight = rounds_bytes(fp, 4) + (3 * 600 << 20)
    k = rounds_that_fit(fp, tight, 32)
    assert 1 <= k <= 4 and rounds_bytes(fp, k) + (3 * 600 << 20) <= tight
    assert rounds_that_fit(fp, 0, 32) == 1  # never fewer than one: the plan then says it does not fit


def test_tasks_that_cannot_run_on_meta_get_no_estimate():
    import types

    mod = types.ModuleType("t")
    exec(  # noqa: S102
        "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x[: int(x.sum().item())]\n"
        "def get_inputs():\n    return [torch.ones(4)]\ndef get_init_inputs():\n    return []\n", mod.__dict__)
    assert meta_footprint(mod, []) is None


def test_the_gate_is_a_no_op_off_cuda():
    import torch

    gate = MemoryGate(torch.device("cpu"))
    task = kernelbench_suite(KB).load("L1/2")
    gate.before_setup(instantiate_task(task, "default"), [])  # would not fit most hosts: not checked on CPU
    assert gate.measured_call(lambda: 7) == 7 and gate.evidence() == {}


@pytest.mark.gpu
def test_gate_on_gpu_measures_the_reference_call():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    gate = MemoryGate(torch.device("cuda:0"))
    task = kernelbench_suite(KB).load("L1/1")
    module = instantiate_task(task, "default")
    gate.before_setup(module, [0.5])
    x = torch.randn(1024, 1024, device="cuda")
    gate.measured_call(lambda: torch.tanh(x) * 0.5)
    assert gate.footprint is not None and gate.footprint.measured and gate.footprint.call_peak_bytes >= 4 << 20


def test_warming_the_meta_device_leaves_the_default_device_alone():
    # A standby judge warms the meta kernels while it waits; nothing after it may land on "meta".
    import torch

    warm_meta()
    assert torch.empty(1).device.type == "cpu"
    assert _footprint("L1/1").output_bytes > 0  # and the shape-only pass still works after it
