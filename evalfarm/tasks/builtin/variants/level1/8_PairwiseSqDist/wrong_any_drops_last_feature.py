import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Gram expansion whose feature loop misses the last feature."""

    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        d = x.shape[1] - 1
        x, y = x[:, :d], y[:, :d]
        xx = (x * x).sum(dim=1, keepdim=True)
        yy = (y * y).sum(dim=1).unsqueeze(0)
        return torch.addmm(xx + yy, x, y.t(), alpha=-2.0).clamp_(min=0.0)
