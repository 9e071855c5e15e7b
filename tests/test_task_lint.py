"""Degenerate tasks: the probe, the lint record and ``evalfarm tasks --lint``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from evalfarm.scoring import as_task
from evalfarm.tasks.lint import degenerate_reason, lint_task

ZERO_TASK = Path(__file__).parent / "adversarial" / "runtime" / "task_zero_output.py"


def test_outputs_that_ignore_the_inputs_are_degenerate():
    sets = [[torch.randn(4, 3)] for _ in range(3)]
    assert "does not depend on them" in degenerate_reason(lambda xs: torch.zeros(4, 3) * xs[0].sum() * 0, sets)
    assert degenerate_reason(lambda xs: xs[0] * 2, sets) == ""
    # a tuple output with one varying part is not degenerate
    assert degenerate_reason(lambda xs: (torch.ones(2), xs[0] + 1), sets) == ""


def test_a_parameter_the_output_ignores_is_not_a_flag():
    # A bias cancelled by a normalisation is a legitimate shortcut, not a degenerate task.
    lin = torch.nn.Linear(8, 8)
    sets = [[torch.randn(5, 8)] for _ in range(3)]
    assert degenerate_reason(lambda xs: torch.nn.functional.layer_norm(lin(xs[0]) + 3.0, (8,)), sets) == ""


def test_no_tensor_inputs_cannot_be_probed():
    assert degenerate_reason(lambda xs: torch.zeros(2), [[3], [4], [5]]) == ""


def test_a_reference_that_mutates_its_inputs_sees_clones():
    x = torch.randn(6)
    keep = x.clone()

    def call(xs):
        xs[0].mul_(0)
        return xs[0]

    assert degenerate_reason(call, [[x], [torch.randn(6)]]) != ""  # all zeros: degenerate
    assert torch.equal(x, keep)


def test_lint_task_on_a_degenerate_and_a_normal_task(data_dir):
    bad = lint_task(as_task(str(ZERO_TASK)))
    assert bad.loaded and bad.degenerate and not bad.ok and bad.ref_ms is not None
    good = lint_task(as_task(str(data_dir / "task_scale.py")))
    assert good.ok and good.degenerate == "" and good.to_dict()["ok"] is True


def test_lint_task_reports_a_broken_task(tmp_path):
    from evalfarm.tasks.format import parse_task

    src = ("import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def forward(self, x):\n"
           "        return x\ndef get_inputs():\n    raise RuntimeError('boom')\ndef get_init_inputs():\n    return []\n")
    lint = lint_task(parse_task(src, "broken"))
    assert not lint.loaded and "boom" in lint.error and not lint.ok


def test_cli_tasks_lint_json():
    out = subprocess.run([sys.executable, "-m", "evalfarm", "tasks", "--lint", "--json"], capture_output=True,
                         text=True, timeout=600, check=True)
    rows = json.loads(out.stdout)
    assert len(rows) >= 20
    assert all(r["lint"]["loaded"] and r["lint"]["ok"] for r in rows), [r for r in rows if not r["lint"]["ok"]]


KB = Path(__file__).parent / "data" / "kernelbench_mini"


def test_lint_plans_against_the_memory_it_is_given():
    # The full-size softmax (6.4 GB in and out) is planned from shapes and never run here.
    from evalfarm.judge.memory_plan import GB
    from evalfarm.tasks.suite import kernelbench_suite

    suite = kernelbench_suite(KB)
    small_card = lint_task(suite.load("L1/2"), "cpu", "default", memory=(40 * 10**9, 80 * 10**9))
    assert small_card.loaded and small_card.fits is False and not small_card.ok
    assert small_card.free_bytes == 40 * 10**9 and small_card.need_bytes > 40 * 10**9
    assert small_card.error.startswith("task_too_large: the task needs ~") and small_card.ref_ms is None
    # A small task against the free memory of an idle H100: fits, and runs.
    tiny = lint_task(suite.load("L1/1"), "cpu", "default", memory=(int(84.5 * GB), int(85 * GB)))
    assert tiny.fits is True and tiny.ok and tiny.free_bytes == int(84.5 * GB) and tiny.ref_ms is not None
    assert lint_task(suite.load("L1/1"), "cpu", "default").fits is None  # CPU, no memory given


def test_degenerate_probe_draws_one_set_at_a_time():
    drawn = []

    def draw(i):
        drawn.append(i)
        return [torch.full((3,), float(i))]

    sets = [lambda i=i: draw(i) for i in range(3)]
    assert degenerate_reason(lambda xs: xs[0] * 2, sets) == ""
    assert drawn == [0, 1]  # drawn when needed, and the probe stops at the first difference
    drawn.clear()
    assert "does not depend on them" in degenerate_reason(lambda xs: torch.zeros(3), sets)
    assert drawn == [0, 1, 2]


@pytest.mark.gpu
def test_lint_on_gpu_reports_the_free_memory_before_its_own_allocations():
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    from evalfarm.judge.memory_plan import device_memory
    from evalfarm.tasks.format import parse_task

    torch.cuda.empty_cache()
    before, _ = device_memory(torch.device("cuda:0"))
    src = ("import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def forward(self, x):\n"
           "        return torch.relu(x)\ndef get_inputs():\n    return [torch.rand(256, 1 << 20)]\n"
           "def get_init_inputs():\n    return []\n")
    row = lint_task(parse_task(src, "relu_1gb"), "cuda", "default")
    assert row.loaded and row.fits is True and row.input_bytes == 1 << 30
    # The lint holds >= 2 GB (inputs, output) while it runs; the free memory it reports is from before.
    assert row.free_bytes is not None and row.free_bytes > before - (256 << 20), (row.free_bytes, before)
