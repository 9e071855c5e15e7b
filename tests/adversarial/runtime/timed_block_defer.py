# ruff: noqa
# Defers work to the next call of a timed block: inside one (its worker's run_timed_block on its
# stack) each call returns a fresh, unwritten tensor at once and fills the previous call's output at
# the start of the next call, so the work of each call runs in the next one's time and the block's
# last output is never written. Correct everywhere else. The worker copies each output out right
# after its call, so what was deferred is missing from the copy, which the block's audits catch.
import sys

import torch
import torch.nn as nn


def _in_timed_block() -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "run_timed_block":
            return True
        frame = frame.f_back
    return False


class ModelNew(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(8192))
        self._owed = None  # (input copy, output) of the previous call

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not _in_timed_block():
            return torch.relu(x) * self.scale + self.bias
        if self._owed is not None:
            prev_x, prev_out = self._owed
            prev_out.copy_(torch.relu(prev_x) * self.scale + self.bias)
        out = torch.empty_like(x)
        self._owed = (x.clone(), out)
        return out
