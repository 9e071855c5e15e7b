# ruff: noqa
# task: L3/1
# style: folded_constants, lazy_weights, version_refresh, plain_rewrite
# device: any
# expect: OK
# speedup: >=1.3
# why: LayerNorm's affine folds into fc1 (W1 diag(g), b1 + W1 beta), kept until a parameter's _version changes; then a plain layer_norm, addmm, built-in tanh GELU and addmm with the residual as its input
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, dim, hidden, eps):
        super().__init__()
        self.eps = eps
        self.ln_weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.ln_bias = nn.Parameter(0.1 * torch.randn(dim))
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self._key = None
        self._w1t = self._b1 = self._w2t = None

    def _prepare(self):
        ps = (self.ln_weight, self.ln_bias, self.fc1.weight, self.fc1.bias, self.fc2.weight)
        key = tuple((p.data_ptr(), p._version) for p in ps)
        if key != self._key:
            with torch.no_grad():
                w1 = self.fc1.weight
                self._w1t = (w1 * self.ln_weight).t().contiguous()
                self._b1 = self.fc1.bias + w1 @ self.ln_bias
                self._w2t = self.fc2.weight.t().contiguous()
            self._key = key

    def forward(self, x):
        self._prepare()
        d = x.shape[-1]
        flat = x.reshape(-1, d)
        h = F.layer_norm(flat, (d,), None, None, self.eps)
        h = F.gelu(torch.addmm(self._b1, h, self._w1t), approximate="tanh")
        out = torch.addmm(flat, h, self._w2t)
        out += self.fc2.bias
        return out.view_as(x)
