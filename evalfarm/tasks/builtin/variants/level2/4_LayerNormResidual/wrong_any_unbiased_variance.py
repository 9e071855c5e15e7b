import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Uses torch.var's default unbiased estimator (divides by D - 1 instead of D)."""

    def __init__(self, hidden, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.bias = nn.Parameter(0.1 * torch.randn(hidden))

    def forward(self, x, residual):
        h = x + residual
        var, mean = torch.var_mean(h, dim=-1, keepdim=True)
        return (h - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias
