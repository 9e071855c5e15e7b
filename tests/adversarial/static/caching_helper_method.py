# ruff: noqa
# expect: caching
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def _remember(self, x, y):
        self.last = (x, y)

    def forward(self, x):
        y = torch.tanh(x)
        self._remember(x, y)
        return y
