# ruff: noqa
# expect: none
# A CUDA graph captured over static buffers; inputs are copied in on every call
# (policy role: allowed under honest, rejected under paper).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, n: int = 64):
        super().__init__()
        self.lin = nn.Linear(n, n)
        self.graph = None
        self.static_x = None
        self.static_y = None

    def _capture(self, x):
        self.static_x = torch.empty_like(x)
        self.static_x.copy_(x)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            self.lin(self.static_x)
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_y = self.lin(self.static_x)

    def forward(self, x):
        if self.graph is None or self.static_x.shape != x.shape:
            self._capture(x)
        self.static_x.copy_(x)
        self.graph.replay()
        return self.static_y.clone()
