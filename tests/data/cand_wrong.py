import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Subtly wrong: the last element is off by 0.5, whatever the weights and inputs.

    (Skipping the bias there instead would pass whenever the random bias's last element
    happens to fall within tolerance, about once in 500 evaluations.)
    """

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(8192))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(x) * self.scale + self.bias
        y[-1] += 0.5
        return y
