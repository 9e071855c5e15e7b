# ruff: noqa
# expect: caching
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = {}

    def forward(self, x):
        key = (x.data_ptr(), x._version)
        if key in self.cache:
            return self.cache[key]
        out = torch.relu(x)
        self.cache[key] = out
        return out
