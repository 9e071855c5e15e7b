"""A small KernelBench-style task: sizes as module-level constants, no SIZE_PROFILES: y = x * scale + 1 over (batch_size, dim)."""

import torch
import torch.nn as nn

batch_size = 16
dim = 256


class Model(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale + 1.0


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [2.0]
