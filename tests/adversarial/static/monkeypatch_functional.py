# ruff: noqa
# expect: monkeypatch
import torch
import torch.nn.functional as F
import torch.nn as nn

_orig = F.gelu
F.gelu = lambda x, approximate="none": _orig(_orig(x))


class ModelNew(nn.Module):
    def forward(self, x):
        return _orig(x)
