import torch
import torch.nn as nn

batch_size = 4096
dim = 4096
SIZE_PROFILES = {"small": {"batch_size": 128, "dim": 2048}}


class Model(nn.Module):
    """Sigmoid-gated interpolation between a residual stream x and an update y:
    x + sigmoid(g) * (y - x)."""

    def __init__(self):
        super().__init__()

    def forward(self, x, y, g):
        gate = torch.sigmoid(g)
        return x + gate * (y - x)


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
