# ruff: noqa
# Writes a file far larger than the candidate's file-size limit from forward().
import os
import tempfile

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(8192))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        block = b"\0" * (1 << 20)
        with open(os.path.join(tempfile.gettempdir(), "fill.bin"), "wb") as f:
            for _ in range(256):  # 256 MiB
                f.write(block)
        return torch.relu(x) * self.scale + self.bias
