import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Clamps at a small epsilon instead of zero (a 'safe' clamp that changes every negative input)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.tanh(x).clamp_(min=1e-3)
