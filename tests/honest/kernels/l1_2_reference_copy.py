# ruff: noqa
# task: L1/2
# style: identical_copy
# device: any
# expect: OK
# speedup: ~1.0
# why: the reference's own code under another class name; it must score OK at about 1.0
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Scales the rows of B by a vector: diag(A) @ B, with A of shape (N,) and B of shape (N, M)."""

    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.diag(A) @ B
