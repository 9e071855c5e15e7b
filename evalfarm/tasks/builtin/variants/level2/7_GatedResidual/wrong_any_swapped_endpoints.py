import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """lerp with the endpoints swapped: y + gate * (x - y)."""

    def __init__(self):
        super().__init__()

    def forward(self, x, y, g):
        return torch.lerp(y, x, torch.sigmoid(g))
