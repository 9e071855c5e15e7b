# ruff: noqa
# In-process tampering with the harness: the worker's block runner (Worker.run_block of the
# worker's module, which runs as __main__) is wrapped so every correctness block's reply names
# rounds shifted by one, as a candidate would to have its results paired with other rounds. The
# judge checks a block's reply against the rounds it sent. The static rule harness_access (sys.modules
# lookup of evalfarm) is what refuses it before it runs.
import sys

import torch
import torch.nn as nn

for _name in ("__main__", "evalfarm.judge.worker"):
    _w = sys.modules.get(_name)
    _cls = getattr(_w, "Worker", None)
    if _cls is not None and hasattr(_cls, "run_block"):
        _orig = _cls.run_block

        def _shifted(self, block, _orig=_orig):
            reply = _orig(self, block)
            for res in reply.get("rounds", []):
                res["r"] += 1
            return reply

        _cls.run_block = _shifted


class ModelNew(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(8192))

    def forward(self, x):
        y = torch.relu(x)
        y = y * self.scale
        y = y + self.bias
        y = y * 1.0
        return y + 0.0
