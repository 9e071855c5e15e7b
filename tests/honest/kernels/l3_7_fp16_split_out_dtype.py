# ruff: noqa
# task: L3/7
# style: mixed_precision, algebraic_shortcut
# device: cuda
# expect: OK
# speedup: >=3
# why: A + I is exact in float16; the float32 right-hand side is split into a float16 high part and a float16 remainder, and two float16 tensor-core GEMMs with float32 output (out_dtype) recover it to about 2^-22 relative, well inside float32 tolerance
import torch
import torch.nn as nn


def _mm_split(a16, x):
    hi = x.to(torch.float16)
    lo = (x - hi.float()).to(torch.float16)
    out = torch.mm(a16, hi, out_dtype=torch.float32)
    out += torch.mm(a16, lo, out_dtype=torch.float32)
    return out


class ModelNew(nn.Module):
    def __init__(self, in_features, hidden, out_features):
        super().__init__()
        self.lin1 = nn.Linear(in_features, hidden)
        self.lin2 = nn.Linear(hidden, out_features)

    def forward(self, x, adj):
        a16 = adj.to(torch.float16)
        a16.diagonal().add_(1.0)
        d = (adj.sum(dim=1) + 1.0).rsqrt_().unsqueeze(1)
        h = (d * _mm_split(a16, d * self.lin1(x))).relu_()
        return d * _mm_split(a16, d * self.lin2(h))
