import torch.nn as nn


class ModelNew(nn.Module):
    """diag(A) @ B scales row i of B by A[i]: a broadcast multiply instead of an N x N matmul."""

    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return A.unsqueeze(1) * B
