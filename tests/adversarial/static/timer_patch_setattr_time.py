# ruff: noqa
# expect: timer_patch
import time as _t
import torch.nn as nn

_real = _t.perf_counter
setattr(_t, "perf_counter", lambda: _real() * 0.5)


class ModelNew(nn.Module):
    def forward(self, x):
        return x
