# ruff: noqa
# task: L3/1
# style: torch_compile
# device: cuda
# expect: OK
# speedup: >=1.2
# why: torch.compile over the block's own formula: the LayerNorm, the GELU and the bias adds become fused generated kernels around two float32 GEMMs
import math

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim, hidden, eps):
        super().__init__()
        self.eps = eps
        self.ln_weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.ln_bias = nn.Parameter(0.1 * torch.randn(dim))
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self._compiled = torch.compile(self._block, dynamic=False)

    def _block(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
        h = (x - mean) / torch.sqrt(var + self.eps) * self.ln_weight + self.ln_bias
        h = self.fc1(h)
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h**3)))
        return x + self.fc2(h)

    def forward(self, x):
        return self._compiled(x)
