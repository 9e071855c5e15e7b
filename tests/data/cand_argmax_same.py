"""The reference itself: argmax(x @ w, dim=1)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(32, 16))

    def forward(self, x):
        return torch.argmax(x @ self.w, dim=1)
