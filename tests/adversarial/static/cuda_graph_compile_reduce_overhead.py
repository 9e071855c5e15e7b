# ruff: noqa
# expect: cuda_graph
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.f = torch.compile(lambda x: x.relu(), mode="reduce-overhead")

    def forward(self, x):
        return self.f(x)
