# ruff: noqa
# expect: caching
import functools
import torch
import torch.nn as nn

_RESULTS = {}


@functools.lru_cache(maxsize=None)
def _compute(x):
    return torch.relu(x)


class ModelNew(nn.Module):
    def forward(self, x):
        fp = x.sum().item()
        if fp not in _RESULTS:
            _RESULTS[fp] = _compute(x)
        return _RESULTS[fp]
