# ruff: noqa
# expect: none
# A parameter or derived weight moved/cast/transposed once and kept; .data_ptr() for an
# alignment check and ._version to refresh the derived weight.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, n: int = 64):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n))
        self.h = torch.zeros(n)
        self._wt = None
        self._wv = -1
        self._half = None

    def _refresh(self, dev):
        if self._wt is None or self.weight._version != self._wv:
            self._wt = self.weight.t().contiguous()
            self._wv = self.weight._version
            w = self.weight.detach()
            self._half = w.to(dev, non_blocking=True).reshape(-1)

    def forward(self, x):
        self.h = self.h.to(x.device)
        self._refresh(x.device)
        aligned = x.data_ptr() % 16 == 0
        if not aligned:
            x = x.clone()
        return x @ self._wt + self.h
