# ruff: noqa
# Tries to allocate (and touch) far more memory than the candidate's limit.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(8192))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hog = [torch.ones(1 << 28) for _ in range(64)]  # 64 GiB of float32
        return torch.relu(x) * self.scale + self.bias + 0 * hog[0][0]
