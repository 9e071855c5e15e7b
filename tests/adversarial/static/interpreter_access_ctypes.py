# ruff: noqa
# expect: interpreter_access
import ctypes
import torch.nn as nn

libc = ctypes.CDLL(None)


class ModelNew(nn.Module):
    def forward(self, x):
        return x
