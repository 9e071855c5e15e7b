# ruff: noqa
# expect: none
# ctypes loading libcuda (and, on a bad pointer, segfaulting: a RUNTIME_ERROR at run time).
import ctypes
import torch
import torch.nn as nn

try:
    _libcuda = ctypes.CDLL("libcuda.so.1")
except OSError:
    _libcuda = None


class ModelNew(nn.Module):
    def forward(self, x):
        if _libcuda is not None and x.numel() < 0:
            ctypes.string_at(0)  # would segfault
        return torch.relu(x)
