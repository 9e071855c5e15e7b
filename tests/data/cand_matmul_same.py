"""The reference itself: C = A @ B."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)
