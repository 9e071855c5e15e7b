# ruff: noqa
# expect: side_stream
import torch
import torch.nn as nn
from torch.cuda import Stream as S


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.s = S()

    def forward(self, a, b):
        with torch.cuda.stream(self.s):
            out = a @ b
        return out
