# ruff: noqa
# task: L2/7
# style: plain_rewrite
# device: any
# expect: OK
# speedup: >=1.05
# why: x + g * (y - x) is torch.lerp(x, y, g): two kernels (sigmoid, lerp) instead of four
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y, g):
        return torch.lerp(x, y, torch.sigmoid(g))
