# ruff: noqa
# task: L1/2
# style: algebraic_shortcut
# device: any
# expect: OK
# speedup: >=3
# why: diag(A) @ B scales row i of B by A[i]; a broadcast multiply is O(N M) instead of an O(N^2 M) matmul with an N x N diagonal matrix
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return A.unsqueeze(1) * B
