# ruff: noqa
# An fp32 matmul computed in bf16 (float32 result): paid 1.71x on an H100 within the strict
# tolerance on uniform [0, 1) inputs; hundreds of times the reference's error against a float64
# ground truth, so the precision gate refuses it.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A.bfloat16(), B.bfloat16()).float()
