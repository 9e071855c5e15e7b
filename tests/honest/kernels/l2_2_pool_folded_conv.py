# ruff: noqa
# task: L2/2
# style: folded_constants, algebraic_shortcut, cudnn_benchmark
# device: any
# expect: OK
# speedup: >=1.5
# why: 2x2 average pooling after a 3x3 conv (padding 1) is one 4x4 conv with stride 2 whose kernel is the average of the four shifted 3x3 kernels: half the multiply-adds, no intermediate; cudnn.benchmark lets cuDNN pick its algorithm on a GPU
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.pool = nn.AvgPool2d(kernel_size=2)
        torch.backends.cudnn.benchmark = True
        self._key = None
        self._w4 = None

    def _weight(self):
        w = self.conv.weight
        key = (w.data_ptr(), w._version, w.device)
        if key != self._key:
            with torch.no_grad():
                o, i = w.shape[:2]
                w4 = w.new_zeros(o, i, 4, 4)
                for dy in (0, 1):
                    for dx in (0, 1):
                        w4[:, :, dy:dy + 3, dx:dx + 3] += w
                self._w4 = (w4 * 0.25).contiguous()
            self._key = key
        return self._w4

    def forward(self, x):
        return F.conv2d(x, self._weight(), self.conv.bias, stride=2, padding=1)
