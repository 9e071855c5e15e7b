# ruff: noqa
# Tells the correctness blocks from the timed rounds after them by looking at its own caller: in a
# block the worker calls it from its block loop (``run_block`` on the stack), a timed round is one
# call per exchange. Honest until it has been called inside a block, and from then on, outside
# one, it returns an unwritten buffer, nearly free. Correct everywhere it is always checked (the
# warm-up's lone calls come before the blocks, every correctness round after them is in a block),
# wrong in every timed round, of which the judge audits one at random in every window of
# 1 / `audit_fraction` (evalfarm.judge.audits): the audits are the defence. (Telling them apart by
# the gaps between calls works too, but only as well as the host's load lets it: the stack always
# tells.)
import sys

import torch
import torch.nn as nn


def _in_block() -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "run_block":
            return True
        frame = frame.f_back
    return False


class ModelNew(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(8192))
        self._saw_block = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _in_block():
            self._saw_block = True
        elif self._saw_block:
            return torch.empty_like(x)
        return torch.relu(x) * self.scale + self.bias
