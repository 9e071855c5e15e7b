import torch
import torch.nn as nn

batch_size = 256
length = 65536
dim = 1
SIZE_PROFILES = {"small": {"batch_size": 64, "length": 4096}}


class Model(nn.Module):
    """Reverse (suffix) cumulative sum along a dimension: out[i] = sum(x[i:])."""

    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.cumsum(x.flip(self.dim), dim=self.dim).flip(self.dim)


def get_inputs():
    return [torch.randn(batch_size, length)]


def get_init_inputs():
    return [dim]
