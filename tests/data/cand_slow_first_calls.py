# A candidate whose first two calls do lazy one-time work (as autotuning or a JIT build would),
# each longer than the per-call bound the tests set; later calls are fast.
import time

import torch
import torch.nn as nn

FIRST_CALL_S = 1.5


class ModelNew(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(8192))
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls <= 2:
            time.sleep(FIRST_CALL_S)
        return torch.relu(x) * self.scale + self.bias
