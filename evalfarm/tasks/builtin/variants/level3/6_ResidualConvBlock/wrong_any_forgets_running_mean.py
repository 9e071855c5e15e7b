import torch
import torch.nn as nn
import torch.nn.functional as F


def _frozen_bn(module, prefix, channels):
    module.register_parameter(prefix + "_weight", nn.Parameter(1.0 + 0.1 * torch.randn(channels)))
    module.register_parameter(prefix + "_bias", nn.Parameter(0.1 * torch.randn(channels)))
    module.register_buffer(prefix + "_mean", 0.1 * torch.randn(channels))
    module.register_buffer(prefix + "_var", 1.0 + 0.5 * torch.rand(channels))


class ModelNew(nn.Module):
    """Folds the frozen batch norms into the convolutions but forgets the running mean
    (b' = bias instead of bias - mean * s)."""

    def __init__(self, channels, eps):
        super().__init__()
        self.eps = eps
        self.conv1 = nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False)
        _frozen_bn(self, "bn1", channels)
        self.conv2 = nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False)
        _frozen_bn(self, "bn2", channels)

    def _folded(self, conv, prefix):
        """Per-call fold: W' = W * s, b' = bias - mean * s with s = weight / sqrt(var + eps)."""
        s = getattr(self, prefix + "_weight") / torch.sqrt(getattr(self, prefix + "_var") + self.eps)
        b = getattr(self, prefix + "_bias")
        return conv.weight * s.view(-1, 1, 1, 1), b

    def forward(self, x):
        w1, b1 = self._folded(self.conv1, "bn1")
        w2, b2 = self._folded(self.conv2, "bn2")
        out = F.conv2d(x, w1, b1, padding=1).relu_()
        out = F.conv2d(out, w2, b2, padding=1)
        return out.add_(x).relu_()
