"""A small test task: y = relu(x) * scale + bias over a vector."""

import torch
import torch.nn as nn

n = 8192
scale = 1.5


class Model(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(x)
        y = y * self.scale
        y = y + self.bias
        y = y * 1.0
        return y + 0.0


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return [scale]
