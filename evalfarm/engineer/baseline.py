"""Baselines: a candidate synthesized from the task itself, scored through the same judge.

``compile_candidate(task)`` is the task's own ``Model`` wrapped in ``torch.compile``: scoring it
gives torch.compile's speedup over the eager reference by exactly the protocol a candidate gets
(same inputs, timing, checks). A candidate's speedup over the compiled baseline is then its
speedup divided by the baseline's (both against the same eager reference).
"""

from __future__ import annotations

from evalfarm.tasks.format import Candidate, Task

BASELINES = ("compile",)

_COMPILE_WRAPPER = '''

# --- baseline: the task's Model under torch.compile (evalfarm.engineer.baseline) ---
class ModelNew(nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()
        self.model = Model(*args, **kwargs)
        self.compiled = torch.compile(self.model)

    def forward(self, *args):
        return self.compiled(*args)
'''


def compile_candidate(task: Task) -> Candidate:
    """A candidate whose ModelNew is the task's Model under torch.compile (default mode)."""
    source = task.source.rstrip() + "\n\nimport torch  # noqa: E402\nimport torch.nn as nn  # noqa: E402\n" + _COMPILE_WRAPPER
    return Candidate(source=source, name=f"compile_baseline_{task.name}")


def speedup_vs(candidate_speedup: float | None, baseline_speedup: float | None) -> float | None:
    """A candidate's speedup over a baseline, both measured against the same eager reference."""
    if candidate_speedup is None or not baseline_speedup:
        return None
    return round(candidate_speedup / baseline_speedup, 4)
