"""GPU test task: KernelBench's level 1 task 1 (C = A @ B, square, inputs uniform in [0, 1)) at
4096, where TF32 and bf16 stay within the strict float32 tolerance."""

import torch
import torch.nn as nn

N = 4096


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


def get_inputs():
    return [torch.rand(N, N), torch.rand(N, N)]


def get_init_inputs():
    return []
