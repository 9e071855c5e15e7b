# ruff: noqa
# task: L3/4
# style: multi_stream, algebraic_shortcut
# device: cuda
# expect: OK
# speedup: >=0.9
# why: each expert runs only on its routed tokens (1/E of the dense work), the experts on separate CUDA streams that first wait for the routing and are all joined (wait_stream) before the output is returned (H100: 1.04x; at this size each expert's slice is a small GEMM, and the per-expert gather, scatter and the routing's host sync cost about what the skipped 1-1/E of the dense work saves; on CPU the same idea gives >=1.3, see l3_4_sparse_dispatch.py)
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim, hidden, num_experts):
        super().__init__()
        self.router = nn.Linear(dim, num_experts)
        self.experts = nn.ModuleList(
            [nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, dim)) for _ in range(num_experts)]
        )
        self._streams = None

    def forward(self, x):
        if self._streams is None or self._streams[0].device != x.device:
            self._streams = [torch.cuda.Stream(device=x.device) for _ in self.experts]
        probs = torch.softmax(self.router(x), dim=-1)
        top_p, top_i = probs.max(dim=-1)
        order = torch.argsort(top_i)
        counts = torch.bincount(top_i, minlength=len(self.experts)).tolist()
        out = torch.empty_like(x)
        main = torch.cuda.current_stream(x.device)
        start = 0
        for e, n in enumerate(counts):
            if n:
                s = self._streams[e]
                s.wait_stream(main)
                idx = order[start:start + n]
                with torch.cuda.stream(s):
                    y = self.experts[e](x.index_select(0, idx)) * top_p.index_select(0, idx).unsqueeze(-1)
                    out.index_copy_(0, idx, y)
                for t in (idx, out, x, top_p):
                    t.record_stream(s)
            start += n
        for e, n in enumerate(counts):
            if n:
                main.wait_stream(self._streams[e])
        return out
