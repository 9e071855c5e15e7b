import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """The reference's own computation, plus a global flag set in the candidate's process."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(8192))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch.backends.cudnn.allow_tf32 = True  # changes what the reference computes on a GPU
        y = torch.relu(x)
        y = y * self.scale
        y = y + self.bias
        y = y * 1.0
        return y + 0.0
