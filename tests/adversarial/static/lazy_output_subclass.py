# ruff: noqa
# expect: lazy_output
import torch
import torch.nn as nn
from torch import Tensor


class Lazy(Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs or {})


class ModelNew(nn.Module):
    def forward(self, x):
        return x.as_subclass(Lazy)
