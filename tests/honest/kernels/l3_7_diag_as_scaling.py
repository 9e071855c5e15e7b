# ruff: noqa
# task: L3/7
# style: algebraic_shortcut
# device: any
# expect: OK
# speedup: >=2
# why: D^-1/2 A D^-1/2 @ h = d * (A @ (d * h)) with d the degree vector: two broadcasts replace two N x N x N matmuls with diagonal matrices, and A_hat is never formed
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, hidden, out_features):
        super().__init__()
        self.lin1 = nn.Linear(in_features, hidden)
        self.lin2 = nn.Linear(hidden, out_features)

    def forward(self, x, adj):
        a = adj.clone()
        a.diagonal().add_(1.0)
        d = a.sum(dim=1).rsqrt_().unsqueeze(1)
        h = torch.relu_(d * (a @ (d * self.lin1(x))))
        return d * (a @ (d * self.lin2(h)))
