# ruff: noqa
# task: L1/2
# style: cuda_graph, algebraic_shortcut
# device: cuda
# expect: OK
# speedup: >=5
# why: diag(A) @ B as a row-scaling broadcast, captured once in a CUDA graph over static buffers; every call copies the inputs in, replays, and returns a fresh clone of the static output
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._key = None
        self._graph = None

    def _capture(self, A, B):
        self._a = torch.empty_like(A)
        self._b = torch.empty_like(B)
        self._out = torch.empty_like(B)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                torch.mul(self._a.unsqueeze(1), self._b, out=self._out)
        torch.cuda.current_stream().wait_stream(side)
        self._graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self._graph):
            torch.mul(self._a.unsqueeze(1), self._b, out=self._out)

    def forward(self, A, B):
        key = (A.shape, B.shape, A.dtype, A.device)
        if key != self._key:
            self._capture(A, B)
            self._key = key
        self._a.copy_(A)
        self._b.copy_(B)
        self._graph.replay()
        return self._out.clone()
