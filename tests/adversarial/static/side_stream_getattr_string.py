# ruff: noqa
# expect: side_stream
import torch as t
import torch.nn as nn

_cuda = getattr(t, "cuda")
_mk = getattr(_cuda, "Stream")


class ModelNew(nn.Module):
    def forward(self, x):
        s = _mk()
        s.wait_stream(t.cuda.current_stream())
        return x * 2
