"""GPU test task: relu over 32M floats (about 0.1 ms on an H100-class GPU)."""

import torch
import torch.nn as nn

n = 1 << 25
SIZE_PROFILES = {"small": {"n": 1 << 14}}


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
