# Honest except in one call, counted from 1 (round AT_CALL - 1: each round calls forward once).
# MODE says what that call does: "wrong" returns a wrong output, "shape" an output of the wrong
# shape, "sleep" sleeps SLEEP_S before computing, "slow_until" sleeps SLEEP_S in every call up to
# and including it. The tests rewrite these three constants.
import time

import torch
import torch.nn as nn

MODE = "wrong"
AT_CALL = 10
SLEEP_S = 0.0


class ModelNew(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(8192))
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        y = torch.relu(x) * self.scale + self.bias
        if self.calls == AT_CALL and MODE == "wrong":
            return y + 1.0
        if self.calls == AT_CALL and MODE == "shape":
            return y[:-1].clone()
        if (self.calls == AT_CALL and MODE == "sleep") or (self.calls <= AT_CALL and MODE == "slow_until"):
            time.sleep(SLEEP_S)
        return y
