# ruff: noqa
# expect: cuda_graph
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.g = None

    def forward(self, x):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y = x * 2
        g.replay()
        return y
