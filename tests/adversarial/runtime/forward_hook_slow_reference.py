# ruff: noqa
# A global forward hook that sleeps whenever the reference's Model runs: the reference looks
# slow and the candidate, identical to it, looks fast (paid 6.96x when both ran in one process).
# The reference runs in its own worker, so the hook never fires on it.
import time

import torch
import torch.nn as nn


def _slow(module, args, output):
    if type(module).__name__ == "Model":
        time.sleep(0.002)


torch.nn.modules.module.register_module_forward_hook(_slow)


class ModelNew(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(8192))

    def forward(self, x):
        y = torch.relu(x)
        y = y * self.scale
        y = y + self.bias
        y = y * 1.0
        return y + 0.0
