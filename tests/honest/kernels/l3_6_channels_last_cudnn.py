# ruff: noqa
# task: L3/6
# style: cudnn_benchmark, folded_constants, pretransformed_weights
# device: cuda
# expect: OK
# speedup: >=1.0
# why: batch norm folded into the conv weights once in __init__ (kept as registered buffers in channels_last layout), cudnn.benchmark picks the fastest exact float32 algorithm, and the residual add and relu run in place on the conv output (H100: 1.05x; cuDNN already runs the reference's float32 convolutions near their best algorithm, so the folded batch norm and in-place add are the only gain)
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
        with torch.no_grad():
            for i, conv in ((1, self.conv1), (2, self.conv2)):
                p = f"bn{i}"
                inv = getattr(self, p + "_weight") / torch.sqrt(getattr(self, p + "_var") + eps)
                w = (conv.weight * inv.view(-1, 1, 1, 1)).contiguous(memory_format=torch.channels_last)
                b = getattr(self, p + "_bias") - getattr(self, p + "_mean") * inv
                self.register_buffer(f"_w{i}", w, persistent=False)
                self.register_buffer(f"_b{i}", b.clone(), persistent=False)

    def forward(self, x):
        xl = x.contiguous(memory_format=torch.channels_last)
        out = F.conv2d(xl, self._w1, self._b1, padding=1).relu_()
        out = F.conv2d(out, self._w2, self._b2, padding=1)
        return out.add_(xl).relu_().contiguous()
