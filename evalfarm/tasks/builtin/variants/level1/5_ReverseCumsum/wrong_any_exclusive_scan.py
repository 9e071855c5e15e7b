import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Computes the exclusive suffix sum (sum(x[i+1:])) instead of the inclusive one."""

    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        total = torch.cumsum(x.flip(self.dim), dim=self.dim).flip(self.dim)
        return total - x
