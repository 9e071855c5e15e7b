"""An honest reordering of C = A @ B: split-K, the sum of four partial products over chunks of K
(what a split-K GEMM kernel does), added in order."""

import torch.nn as nn

CHUNKS = 4


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, A, B):
        k = A.shape[1]
        step = -(-k // CHUNKS)
        out = A[:, :step] @ B[:step]
        for s in range(step, k, step):
            out = out + A[:, s:s + step] @ B[s:s + step]
        return out
