import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Weight-sum shortcut whose reduction over the output features misses the last one."""

    def __init__(self, in_features, out_features, scaling_factor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        n = self.linear.weight.shape[0] - 1
        w = self.linear.weight[:n].sum(dim=0, keepdim=True)
        b = self.linear.bias[:n].sum().reshape(1)
        return torch.addmm(b, x, w.t()) * (0.5 * self.scaling_factor)
