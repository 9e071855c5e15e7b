"""C = A @ B in float16 for 128 x 128 matrices uniform in [0, 1): a half-precision task, whose
precision gate compares the candidate with its own float16 reference (k = 3)."""

import torch
import torch.nn as nn

n = 128


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


def get_inputs():
    return [torch.rand(n, n).half(), torch.rand(n, n).half()]


def get_init_inputs():
    return []
