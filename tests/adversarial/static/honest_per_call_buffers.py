# ruff: noqa
# expect: none
import math

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim
        self.norm = nn.LayerNorm(dim)

    def _tile(self, n: int) -> int:
        return int(math.ceil(n / 128)) * 128

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        tmp = torch.zeros(x.shape[0], self._tile(x.shape[-1]), device=x.device, dtype=x.dtype)
        torch.add(x, 1.0, out=out)
        tmp[:, : x.shape[-1]].copy_(out)
        results = []
        for row in tmp.unbind(0):
            results.append(row[: x.shape[-1]])
        cache = {}
        cache["y"] = torch.stack(results)
        return self.norm(cache["y"]).to(torch.float32)
