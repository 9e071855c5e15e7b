"""C = A @ B for 256 x 256 matrices uniform in [0, 1): KernelBench's level 1 style (its inputs are
torch.rand), small enough for CPU tests of the precision gate."""

import torch
import torch.nn as nn

n = 256


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


def get_inputs():
    return [torch.rand(n, n), torch.rand(n, n)]


def get_init_inputs():
    return []
