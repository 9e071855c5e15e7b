# ruff: noqa
# task: L1/4
# style: split_k, plain_rewrite
# device: any
# expect: OK
# speedup: >=0.5
# why: forms U @ V as the reference does, then x @ (U @ V) as four partial products over quarters of the inner dimension summed in order (a split-K GEMM's reduction): the same sums in another order, no less precise than the reference
import torch
import torch.nn as nn

CHUNKS = 4


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, U, V):
        w = torch.matmul(U, V)
        d = x.shape[1]
        step = -(-d // CHUNKS)
        out = torch.matmul(x[:, :step], w[:step])
        for s in range(step, d, step):
            out += torch.matmul(x[:, s:s + step], w[s:s + step])
        return out
