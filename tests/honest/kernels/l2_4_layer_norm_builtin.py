# ruff: noqa
# task: L2/4
# style: plain_rewrite
# device: any
# expect: OK
# speedup: >=1.5
# why: the hand-written LayerNorm (biased variance, eps inside the sqrt, affine) is exactly F.layer_norm; one add, then one fused normalisation
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.bias = nn.Parameter(0.1 * torch.randn(hidden))

    def forward(self, x, residual):
        h = torch.add(x, residual)
        return F.layer_norm(h, (h.shape[-1],), self.weight, self.bias, self.eps)
