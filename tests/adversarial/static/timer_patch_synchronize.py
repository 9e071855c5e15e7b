# ruff: noqa
# expect: timer_patch
import torch
import torch.nn as nn

torch.cuda.synchronize = lambda *a, **k: None


class ModelNew(nn.Module):
    def forward(self, x):
        return x
