# ruff: noqa
# In-process tampering with the harness: the worker's messages (Worker.send of the worker's module,
# which runs as __main__) are wrapped so every "called" report inside a correctness block names the
# next round, as a candidate would to make the judge's per-call clock run ahead of its calls. The
# judge expects the block's rounds in order. The static rule harness_access (sys.modules lookup of
# evalfarm) is what refuses it before it runs.
import sys

import torch
import torch.nn as nn

for _name in ("__main__", "evalfarm.judge.worker"):
    _w = sys.modules.get(_name)
    _cls = getattr(_w, "Worker", None)
    if _cls is not None and hasattr(_cls, "send"):
        _orig = _cls.send

        def _ahead(self, msg, _orig=_orig):
            if isinstance(msg, dict) and msg.get("op") == "called":
                msg = {**msg, "r": msg["r"] + 1}
            return _orig(self, msg)

        _cls.send = _ahead


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
