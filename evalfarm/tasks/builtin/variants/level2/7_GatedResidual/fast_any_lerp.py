import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """x + gate * (y - x) is torch.lerp(x, y, gate): sigmoid plus one fused pass."""

    def __init__(self):
        super().__init__()

    def forward(self, x, y, g):
        return torch.lerp(x, y, torch.sigmoid(g))
