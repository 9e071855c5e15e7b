# ruff: noqa
# expect: caching
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.out = None

    def forward(self, x):
        if self.out is None:
            self.out = torch.empty_like(x)
        torch.relu(x, out=self.out)
        return self.out
