import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """|x - y|^2 = |x|^2 + |y|^2 - 2 x.y: one GEMM instead of an (N, M, D) temporary."""

    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        xx = (x * x).sum(dim=1, keepdim=True)
        yy = (y * y).sum(dim=1).unsqueeze(0)
        return torch.addmm(xx + yy, x, y.t(), alpha=-2.0).clamp_(min=0.0)
