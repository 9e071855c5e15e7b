import math

import torch
import torch.nn as nn

batch_size = 8
seq_len = 512
dim = 1024
hidden = 4096
eps = 1e-5
SIZE_PROFILES = {"small": {"batch_size": 2, "seq_len": 128, "dim": 64, "hidden": 256}}


class Model(nn.Module):
    """Pre-norm transformer MLP block with a hand-written LayerNorm and tanh-GELU:
    x + fc2(gelu_tanh(fc1(layernorm(x))))."""

    def __init__(self, dim, hidden, eps):
        super().__init__()
        self.eps = eps
        self.ln_weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.ln_bias = nn.Parameter(0.1 * torch.randn(dim))
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
        h = (x - mean) / torch.sqrt(var + self.eps) * self.ln_weight + self.ln_bias
        h = self.fc1(h)
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h**3)))
        h = self.fc2(h)
        return x + h


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim, hidden, eps]
