# ruff: noqa
# task: L2/4
# style: triton
# device: cuda
# expect: OK
# speedup: >=2
# why: a Triton kernel with one program per row: residual add, mean, biased variance, normalise and affine with one read of each input and one write
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _add_ln_kernel(x_ptr, r_ptr, w_ptr, b_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    off = row.to(tl.int64) * n_cols + cols
    h = tl.load(x_ptr + off, mask=mask, other=0.0) + tl.load(r_ptr + off, mask=mask, other=0.0)
    mean = tl.sum(h, axis=0) / n_cols
    diff = tl.where(mask, h - mean, 0.0)
    var = tl.sum(diff * diff, axis=0) / n_cols
    inv = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0)
    tl.store(y_ptr + off, diff * inv * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.bias = nn.Parameter(0.1 * torch.randn(hidden))

    def forward(self, x, residual):
        n = x.shape[-1]
        x2 = x.reshape(-1, n).contiguous()
        r2 = residual.reshape(-1, n).contiguous()
        y = torch.empty_like(x2)
        block = triton.next_power_of_2(n)
        _add_ln_kernel[(x2.shape[0],)](x2, r2, self.weight, self.bias, y, n, self.eps,
                                       BLOCK=block, num_warps=4 if block <= 1024 else 8)
        return y.view_as(x)
