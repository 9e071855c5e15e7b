# ruff: noqa
# task: L1/1
# style: plain_rewrite, set_num_threads
# device: any
# expect: OK
# speedup: >=1.5
# why: F.gelu(approximate="tanh") is the same formula in one pass instead of eight; the thread count is set to the cores this process may use
import os

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        # Use every core this process is allowed to run on (the candidate's own process).
        torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))

    def forward(self, x):
        return F.gelu(x, approximate="tanh")
