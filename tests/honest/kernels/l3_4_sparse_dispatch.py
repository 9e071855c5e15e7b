# ruff: noqa
# task: L3/4
# style: algebraic_shortcut
# device: any
# expect: OK
# speedup: >=1.3
# why: the dense reference runs every expert on every token and keeps one; running each expert only on the tokens routed to it gives the same rows with 1/E of the expert work
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim, hidden, num_experts):
        super().__init__()
        self.router = nn.Linear(dim, num_experts)
        self.experts = nn.ModuleList(
            [nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, dim)) for _ in range(num_experts)]
        )

    def forward(self, x):
        probs = torch.softmax(self.router(x), dim=-1)
        top_p, top_i = probs.max(dim=-1)
        out = torch.empty_like(x)
        order = torch.argsort(top_i)
        counts = torch.bincount(top_i, minlength=len(self.experts)).tolist()
        start = 0
        for e, n in enumerate(counts):
            if n:
                idx = order[start:start + n]
                out[idx] = self.experts[e](x[idx]) * top_p[idx].unsqueeze(-1)
            start += n
        return out
