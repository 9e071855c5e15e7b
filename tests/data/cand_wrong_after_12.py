# Right for its first 12 calls, then off by one: caught in correctness, wherever its 13th call falls.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(8192))
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        y = torch.relu(x) * self.scale + self.bias
        return y + 1.0 if self.calls > 12 else y
