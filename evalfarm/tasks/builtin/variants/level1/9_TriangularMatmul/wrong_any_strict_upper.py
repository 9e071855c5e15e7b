import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Keeps only the strictly upper part (triu with diagonal=1), dropping the diagonal."""

    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.triu(torch.matmul(A, B), diagonal=1)
