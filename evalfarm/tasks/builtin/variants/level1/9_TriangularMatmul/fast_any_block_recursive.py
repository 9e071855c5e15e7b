import torch
import torch.nn as nn


def _triu_mm(a, b, out, min_size):
    """out = a @ b for upper-triangular a, b, skipping the blocks that are known to be zero.

    [A11 A12] [B11 B12]   [A11 B11   A11 B12 + A12 B22]
    [ 0  A22] [ 0  B22] = [   0           A22 B22     ]
    The product of upper-triangular matrices is exactly upper-triangular (every term below the
    diagonal has a zero factor), so small diagonal blocks can use a plain matmul.
    """
    n = a.shape[0]
    if n <= min_size:
        torch.matmul(a, b, out=out)
        return
    h = n // 2
    _triu_mm(a[:h, :h], b[:h, :h], out[:h, :h], min_size)
    _triu_mm(a[h:, h:], b[h:, h:], out[h:, h:], min_size)
    top_right = torch.matmul(a[:h, :h], b[:h, h:])
    top_right.addmm_(a[:h, h:], b[h:, h:])
    out[:h, h:] = top_right
    out[h:, :h] = 0


class ModelNew(nn.Module):
    """Block-recursive triangular product: about 40% of the flops of a full matmul."""

    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        out = torch.empty(A.shape[0], B.shape[1], dtype=A.dtype, device=A.device)
        _triu_mm(A, B, out, min_size=max(128, A.shape[0] // 4))
        return out
