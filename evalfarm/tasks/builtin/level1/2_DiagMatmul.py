import torch
import torch.nn as nn

N = 4096
M = 4096
SIZE_PROFILES = {"small": {"N": 320, "M": 256}}


class Model(nn.Module):
    """Scales the rows of B by a vector: diag(A) @ B, with A of shape (N,) and B of shape (N, M)."""

    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.diag(A) @ B


def get_inputs():
    return [torch.randn(N), torch.randn(N, M)]


def get_init_inputs():
    return []
