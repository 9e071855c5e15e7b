# ruff: noqa
# expect: none
# cuDNN autotuning and similar performance switches set in __init__.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, cin: int = 3, cout: int = 8):
        super().__init__()
        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.enabled = True
        torch.backends.cuda.preferred_linalg_library("default")
        self.conv = nn.Conv2d(cin, cout, 3)

    def forward(self, x):
        return self.conv(x)
