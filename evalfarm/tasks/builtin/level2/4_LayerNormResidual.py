import torch
import torch.nn as nn

tokens = 16384
hidden = 1024
eps = 1e-5
SIZE_PROFILES = {"small": {"tokens": 1024, "hidden": 256}}


class Model(nn.Module):
    """Residual add followed by a hand-written LayerNorm over the last dimension:
    h = x + residual; (h - mean(h)) / sqrt(var(h) + eps) * weight + bias (biased variance)."""

    def __init__(self, hidden, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.bias = nn.Parameter(0.1 * torch.randn(hidden))

    def forward(self, x, residual):
        h = x + residual
        mean = h.mean(dim=-1, keepdim=True)
        var = ((h - mean) ** 2).mean(dim=-1, keepdim=True)
        return (h - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


def get_inputs():
    return [torch.randn(tokens, hidden), torch.randn(tokens, hidden)]


def get_init_inputs():
    return [hidden, eps]
