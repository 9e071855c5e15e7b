import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """sum_o (x W^T + b)_o = x . (sum_o W_o) + sum(b): a GEMV instead of a GEMM."""

    def __init__(self, in_features, out_features, scaling_factor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        w = self.linear.weight.sum(dim=0, keepdim=True)
        b = self.linear.bias.sum().reshape(1)
        return torch.addmm(b, x, w.t(), alpha=0.5 * self.scaling_factor, beta=0.5 * self.scaling_factor)
