# ruff: noqa
# task: L1/1
# style: triton
# device: cuda
# expect: OK
# speedup: >=2
# why: a Triton elementwise kernel computing 0.5 x (1 + tanh(u)) as x * sigmoid(2u) (the same function) in one pass
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _gelu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    tl.store(y_ptr + offs, x * tl.sigmoid(2.0 * u), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        xc = x.contiguous()
        y = torch.empty_like(xc)
        n = xc.numel()
        block = 2048
        _gelu_kernel[(triton.cdiv(n, block),)](xc, y, n, BLOCK=block, num_warps=8)
        return y
