import torch.nn as nn


class ModelNew(nn.Module):
    """Row scaling that, like a tiled kernel missing its remainder, leaves the last row unscaled."""

    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        out = B.clone()
        n = A.shape[0] - 1
        out[:n] = A[:n].unsqueeze(1) * B[:n]
        return out
