# ruff: noqa
# task: L3/6
# style: folded_constants, lazy_weights, cudnn_benchmark
# device: any
# expect: OK
# speedup: >=0.9
# why: frozen batch norm is a per-channel affine map, folded into the conv weights and a bias on first call (self._w1 = self._w1.to(x.device) keeps them where the input is); the residual add and relu run in place on the conv's fresh output
import torch
import torch.nn as nn
import torch.nn.functional as F


def _frozen_bn(module, prefix, channels):
    module.register_parameter(prefix + "_weight", nn.Parameter(1.0 + 0.1 * torch.randn(channels)))
    module.register_parameter(prefix + "_bias", nn.Parameter(0.1 * torch.randn(channels)))
    module.register_buffer(prefix + "_mean", 0.1 * torch.randn(channels))
    module.register_buffer(prefix + "_var", 1.0 + 0.5 * torch.rand(channels))


class ModelNew(nn.Module):
    def __init__(self, channels, eps):
        super().__init__()
        self.eps = eps
        self.conv1 = nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False)
        _frozen_bn(self, "bn1", channels)
        self.conv2 = nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False)
        _frozen_bn(self, "bn2", channels)
        torch.backends.cudnn.benchmark = True
        self._w1 = self._b1 = self._w2 = self._b2 = None

    def _fold(self, conv, prefix):
        w = getattr(self, prefix + "_weight")
        inv = w / torch.sqrt(getattr(self, prefix + "_var") + self.eps)
        weight = conv.weight * inv.view(-1, 1, 1, 1)
        bias = getattr(self, prefix + "_bias") - getattr(self, prefix + "_mean") * inv
        return weight.contiguous(), bias.contiguous()

    def forward(self, x):
        if self._w1 is None:
            with torch.no_grad():
                self._w1, self._b1 = self._fold(self.conv1, "bn1")
                self._w2, self._b2 = self._fold(self.conv2, "bn2")
        if self._w1.device != x.device:
            self._w1, self._b1 = self._w1.to(x.device), self._b1.to(x.device)
            self._w2, self._b2 = self._w2.to(x.device), self._b2.to(x.device)
        out = F.conv2d(x, self._w1, self._b1, padding=1).relu_()
        out = F.conv2d(out, self._w2, self._b2, padding=1)
        return out.add_(x).relu_()
