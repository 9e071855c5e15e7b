import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Returns a Parameter: a torch.Tensor subclass, so not exactly the reference's type."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(8192))

    def forward(self, x):
        return nn.Parameter(torch.relu(x) * self.scale + self.bias, requires_grad=False)
