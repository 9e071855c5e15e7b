# ruff: noqa
# expect: reduced_precision
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        with torch.autocast("cuda"):
            c = torch.matmul(a.half(), b.to(torch.float16))
        return c.float()
