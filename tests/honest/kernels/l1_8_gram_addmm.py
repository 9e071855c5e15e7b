# ruff: noqa
# task: L1/8
# style: algebraic_shortcut
# device: any
# expect: OK
# speedup: >=1.2
# why: |x - y|^2 = |x|^2 + |y|^2 - 2 x.y; one GEMM (addmm with alpha=-2) instead of a (Q, K, D) difference tensor
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        xx = x.square().sum(dim=1, keepdim=True)
        yy = y.square().sum(dim=1).unsqueeze(0)
        return torch.addmm(xx + yy, x, y.t(), beta=1.0, alpha=-2.0)
