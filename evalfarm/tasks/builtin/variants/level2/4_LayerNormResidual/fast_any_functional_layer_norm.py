import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    """The hand-written normalization is exactly F.layer_norm: add, then one fused kernel."""

    def __init__(self, hidden, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.bias = nn.Parameter(0.1 * torch.randn(hidden))

    def forward(self, x, residual):
        h = x + residual
        return F.layer_norm(h, (h.shape[-1],), self.weight, self.bias, self.eps)
