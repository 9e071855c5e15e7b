# ruff: noqa
# expect: process_abuse
import os
import signal
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        os.kill(os.getppid(), signal.SIGSTOP)
        os._exit(0)
