# ruff: noqa
# Removes a file outside its own directory at import. Whatever verdict follows, the file is gone
# before it: unsafe to run, so the static rule filesystem refuses it before anything runs.
import os

import torch
import torch.nn as nn

VICTIM = ""
if VICTIM and os.path.exists(VICTIM):
    os.remove(VICTIM)


class ModelNew(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(8192))

    def forward(self, x):
        return torch.relu(x) * self.scale + self.bias
