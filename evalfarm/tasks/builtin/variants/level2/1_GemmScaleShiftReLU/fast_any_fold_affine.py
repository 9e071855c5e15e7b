import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Folds the scale and shift into the GEMM (W' = scale * W, b' = scale * b + shift, computed
    each call from the current parameters) and applies ReLU in place: one GEMM, one pass."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = nn.Parameter(torch.randn(out_features))
        self.shift = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        w = self.linear.weight * self.scale.unsqueeze(1)
        b = torch.addcmul(self.shift, self.linear.bias, self.scale)
        return torch.addmm(b, x, w.t()).relu_()
