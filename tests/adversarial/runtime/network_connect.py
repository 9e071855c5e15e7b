# ruff: noqa
# Connects to a TCP port on the host's loopback from inside forward (PORT is filled in by the test).
import socket

import torch
import torch.nn as nn

PORT = 0


class ModelNew(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(8192))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with socket.create_connection(("127.0.0.1", PORT), timeout=2) as s:
            s.sendall(b"leak")
        return torch.relu(x) * self.scale + self.bias
