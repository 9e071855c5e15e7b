# ruff: noqa
# A child that leaves the candidate's process group (setsid), so stopping the group does not stop
# it: it would run on during the reference's calls and while the next inputs are written (here it
# only spins, taking a core from the reference). Started in the first call, so no build or load
# step sees it.
import os
import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(8192))
        self.started = False

    def forward(self, x):
        if not self.started:
            self.started = True
            if os.fork() == 0:
                os.setsid()
                end = time.time() + 30
                while time.time() < end:
                    pass
                os._exit(0)
        return torch.relu(x) * self.scale + self.bias
