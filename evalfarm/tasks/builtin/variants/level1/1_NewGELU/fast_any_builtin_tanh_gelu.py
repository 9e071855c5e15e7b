import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    """One fused pass: PyTorch's own tanh-approximate GELU computes the same formula."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.gelu(x, approximate="tanh")
