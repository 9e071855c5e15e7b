# ruff: noqa
# task: L1/4
# style: algebraic_shortcut, plain_rewrite
# device: any
# expect: OK
# speedup: >=3
# why: torch.linalg.multi_dot picks the cheapest association, (x @ U) @ V, O(B D r) instead of forming the D x D product
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, U, V):
        return torch.linalg.multi_dot([x, U, V])
