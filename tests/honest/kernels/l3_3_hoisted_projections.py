# ruff: noqa
# task: L3/3
# style: algebraic_shortcut, plain_rewrite
# device: any
# expect: OK
# speedup: >=1.7
# why: the gate and candidate projections do not depend on h, so both run as one GEMM over all time steps before the loop; the loop keeps only h = u + a * (h - u) (same value as a h + (1 - a) u) written into a preallocated output
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_dim, hidden):
        super().__init__()
        self.hidden = hidden
        self.gate = nn.Linear(in_dim, hidden)
        self.cand = nn.Linear(in_dim, hidden)
        self.proj = nn.Linear(hidden, in_dim)

    def forward(self, x):
        b, t, _ = x.shape
        hd = self.hidden
        w = torch.cat([self.gate.weight, self.cand.weight], dim=0)
        bias = torch.cat([self.gate.bias, self.cand.bias], dim=0)
        pre = torch.addmm(bias, x.reshape(b * t, -1), w.t()).view(b, t, 2 * hd)
        a = torch.sigmoid(pre[..., :hd])
        u = torch.tanh(pre[..., hd:])
        hs = torch.empty(b, t, hd, dtype=x.dtype, device=x.device)
        h = torch.zeros(b, hd, dtype=x.dtype, device=x.device)
        for i in range(t):
            a_i, u_i = a[:, i], u[:, i]
            h = a_i * h + (1.0 - a_i) * u_i
            hs[:, i] = h
        return self.proj(hs)
