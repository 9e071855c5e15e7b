# ruff: noqa
# task: L3/3
# style: cuda_graph, algebraic_shortcut
# device: cuda
# expect: OK
# speedup: >=3
# why: projections hoisted out of the time loop (one GEMM), then the T-step elementwise recurrence and the output projection captured once in a CUDA graph over static buffers; each call copies x in, replays, and returns a clone of the static output
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_dim, hidden):
        super().__init__()
        self.hidden = hidden
        self.gate = nn.Linear(in_dim, hidden)
        self.cand = nn.Linear(in_dim, hidden)
        self.proj = nn.Linear(hidden, in_dim)
        self._key = None

    def _body(self):
        b, t, _ = self._x.shape
        hd = self.hidden
        w = torch.cat([self.gate.weight, self.cand.weight], dim=0)
        bias = torch.cat([self.gate.bias, self.cand.bias], dim=0)
        pre = torch.addmm(bias, self._x.reshape(b * t, -1), w.t()).view(b, t, 2 * hd)
        a = torch.sigmoid(pre[..., :hd])
        u = torch.tanh(pre[..., hd:])
        h = self._h0
        for i in range(t):
            a_i = a[:, i]
            h = a_i * h + (1.0 - a_i) * u[:, i]
            self._hs[:, i] = h
        torch.addmm(self.proj.bias, self._hs.view(b * t, hd), self.proj.weight.t(), out=self._out.view(b * t, -1))

    def _capture(self, x):
        b, t, _ = x.shape
        self._x = torch.empty_like(x)
        self._h0 = torch.zeros(b, self.hidden, dtype=x.dtype, device=x.device)
        self._hs = torch.empty(b, t, self.hidden, dtype=x.dtype, device=x.device)
        self._out = torch.empty(b, t, self.proj.out_features, dtype=x.dtype, device=x.device)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.no_grad():
            self._body()
        torch.cuda.current_stream().wait_stream(side)
        self._graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self._graph), torch.no_grad():
            self._body()

    def forward(self, x):
        key = (x.shape, x.dtype, x.device)
        if key != self._key:
            self._capture(x)
            self._key = key
        self._x.copy_(x)
        self._graph.replay()
        return self._out.clone()
