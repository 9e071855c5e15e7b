import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """RMS with an 'unbiased' divisor C - 1 instead of C (about 1/(2C) relative error)."""

    def __init__(self, num_features, eps):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x):
        c = x.shape[1]
        ms = (x * x).sum(dim=1, keepdim=True) / (c - 1)
        return x * torch.rsqrt(ms + self.eps)
