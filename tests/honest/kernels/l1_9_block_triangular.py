# ruff: noqa
# task: L1/9
# style: algebraic_shortcut
# device: cpu
# expect: OK
# speedup: >=1.1
# why: (CPU: on an H100 the recursion measured 0.34x against one cuBLAS call) for upper-triangular A and B the lower-left block of A @ B is zero, so 2x2 blocking needs four half-size products (half the flops) and the diagonal blocks recurse
import torch
import torch.nn as nn

_LEAF = 128


def _triu_mm(a, b):
    n = a.shape[0]
    if n <= _LEAF:
        return torch.triu(a @ b)
    h = n // 2
    out = torch.zeros_like(a)
    out[:h, :h] = _triu_mm(a[:h, :h], b[:h, :h])
    out[h:, h:] = _triu_mm(a[h:, h:], b[h:, h:])
    out[:h, h:] = torch.addmm(a[:h, :h] @ b[:h, h:], a[:h, h:], b[h:, h:])
    return out


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return _triu_mm(A, B)
