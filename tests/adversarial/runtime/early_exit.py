# ruff: noqa
# Ends its own process in the middle of a call, hoping a silent exit reads as success.
import os

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.randn(8192))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        os._exit(0)
