"""A task whose outputs are ~1e-4 in scale: allclose(atol=1e-2) alone accepts zeros."""

import torch
import torch.nn as nn

n = 4096


class Model(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * self.scale


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return [1e-4]
