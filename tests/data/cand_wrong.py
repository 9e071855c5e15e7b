import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Subtly wrong: the bias is skipped on the last element."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(8192))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(x) * self.scale
        y[:-1] += self.bias[:-1]
        return y
