# ruff: noqa
# expect: comparator_patch
import torch
import torch.nn as nn

torch.allclose = lambda *a, **k: True
torch.Tensor.__eq__ = lambda a, b: torch.ones((), dtype=torch.bool)


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.zeros_like(x)
