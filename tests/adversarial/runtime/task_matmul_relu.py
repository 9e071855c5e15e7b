"""relu(x @ w): the matmul's result is a temporary of the output's size and dtype, freed inside
the call, so the next allocation of that size may get it back still holding x @ w."""

import torch
import torch.nn as nn

batch = 2048
k = 2048
n = 2048
SIZE_PROFILES = {"small": {"batch": 256, "k": 256, "n": 256}}


class Model(nn.Module):
    """relu(x @ w) for a fixed weight w of shape (k, n)."""

    def __init__(self, k: int, n: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(k, n) / k**0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ self.w)


def get_inputs():
    return [torch.randn(batch, k)]


def get_init_inputs():
    return [k, n]
