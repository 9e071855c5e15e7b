import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    """Folded 4x4 kernel built with assignment instead of accumulation, so the overlapping taps
    keep only the last shifted copy."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.pool = nn.AvgPool2d(kernel_size=2)

    def forward(self, x):
        w = self.conv.weight
        w4 = w.new_zeros(w.shape[0], w.shape[1], 4, 4)
        for a in (0, 1):
            for b in (0, 1):
                w4[:, :, a : a + 3, b : b + 3] = w
        w4 *= 0.25
        return F.conv2d(x, w4, self.conv.bias, stride=2, padding=1)
