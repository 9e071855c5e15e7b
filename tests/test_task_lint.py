"""Degenerate tasks: the probe, the lint record and ``evalfarm tasks --lint``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
