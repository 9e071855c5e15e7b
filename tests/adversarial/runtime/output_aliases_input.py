# ruff: noqa
# Computes in place in its input and returns it (no allocation at all).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(8192))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.relu_().mul_(self.scale).add_(self.bias)
