import torch
import torch.nn as nn

batch_size = 32
in_channels = 64
out_channels = 128
height = 128
width = 128
SIZE_PROFILES = {
    "small": {"batch_size": 4, "in_channels": 32, "out_channels": 64, "height": 32, "width": 32}
}


class Model(nn.Module):
    """A 3x3 convolution (padding 1) followed by 2x2 average pooling."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.pool = nn.AvgPool2d(kernel_size=2)

    def forward(self, x):
        return self.pool(self.conv(x))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
