# ruff: noqa
# The honest part of the attacks on task_scale.py: relu(x) * scale + bias in three operations,
# where the reference takes five (it also multiplies by 1.0 and adds 0.0). Where calls are
# launch-bound (a GPU, 8192 elements) this alone is legitimately faster; scripts/attack_sweep.py
# scores it next to the attacks and pays an attack only above what this earns.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(8192))

    def forward(self, x):
        return torch.relu(x) * self.scale + self.bias
