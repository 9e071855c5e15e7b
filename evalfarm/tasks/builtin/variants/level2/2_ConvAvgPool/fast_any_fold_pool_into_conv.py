import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    """avgpool2x2(conv3x3(x)) is one 4x4 convolution with stride 2: its kernel is the 3x3 kernel
    box-filtered by 2x2 / 4. That is 16/4 = 4 MACs per output pixel and channel pair instead of 9."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.pool = nn.AvgPool2d(kernel_size=2)

    def forward(self, x):
        w = self.conv.weight
        w4 = w.new_zeros(w.shape[0], w.shape[1], 4, 4)
        for a in (0, 1):
            for b in (0, 1):
                w4[:, :, a : a + 3, b : b + 3] += w
        w4 *= 0.25
        return F.conv2d(x, w4, self.conv.bias, stride=2, padding=1)
