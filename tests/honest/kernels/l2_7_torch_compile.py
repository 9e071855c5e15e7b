# ruff: noqa
# task: L2/7
# style: torch_compile
# device: any
# expect: OK
# speedup: >=0.8
# why: torch.compile fuses sigmoid, subtract, multiply and add into one generated loop: one read of each input and one write
import torch
import torch.nn as nn


def _gated(x, y, g):
    return x + torch.sigmoid(g) * (y - x)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._fn = torch.compile(_gated, dynamic=False)

    def forward(self, x, y, g):
        return self._fn(x, y, g)
