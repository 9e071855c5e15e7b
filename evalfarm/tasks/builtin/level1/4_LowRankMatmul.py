import torch
import torch.nn as nn

batch_size = 4096
dim = 4096
rank = 64
SIZE_PROFILES = {"small": {"batch_size": 256, "dim": 384, "rank": 16}}


class Model(nn.Module):
    """Multiplies x (B, D) by a low-rank matrix given by its factors: x @ (U @ V),
    with U of shape (D, r) and V of shape (r, D)."""

    def __init__(self):
        super().__init__()

    def forward(self, x, U, V):
        return torch.matmul(x, torch.matmul(U, V))


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(dim, rank), torch.randn(rank, dim)]


def get_init_inputs():
    return []
