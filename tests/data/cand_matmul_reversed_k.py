"""An honest reordering of C = A @ B: the products summed in the opposite order of K."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A.flip(1), B.flip(0))
