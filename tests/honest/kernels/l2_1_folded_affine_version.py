# ruff: noqa
# task: L2/1
# style: folded_constants, version_refresh
# device: any
# expect: OK
# speedup: >=1.1
# why: (xW^T + b) * s + t = x (sW)^T + (s b + t); the folded weight is rebuilt whenever a parameter's _version changes, so it is never stale; addmm plus an in-place relu on its fresh output
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = nn.Parameter(torch.randn(out_features))
        self.shift = nn.Parameter(torch.randn(out_features))
        self._key = None
        self._w = self._b = None

    def _params(self):
        return (self.linear.weight, self.linear.bias, self.scale, self.shift)

    def _folded(self):
        key = tuple((p.data_ptr(), p._version, p.device) for p in self._params())
        if key != self._key:
            with torch.no_grad():
                w, b, s, t = self._params()
                self._w = (w * s.unsqueeze(1)).t().contiguous()  # (in, out)
                self._b = torch.addcmul(t, b, s)
            self._key = key
        return self._w, self._b

    def forward(self, x):
        w, b = self._folded()
        return torch.addmm(b, x, w).relu_()
