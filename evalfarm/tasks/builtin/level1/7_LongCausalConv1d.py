import torch
import torch.nn as nn

batch_size = 8
channels = 256
length = 4096
kernel_size = 512
SIZE_PROFILES = {"small": {"batch_size": 2, "channels": 16, "length": 1024, "kernel_size": 64}}


class Model(nn.Module):
    """Causal depthwise 1-D convolution with a long kernel (as in Hyena-style long-convolution
    layers): Conv1d(C, C, k, groups=C, padding=k - 1) with bias, keeping the first T outputs."""

    def __init__(self, channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv1d(
            channels, channels, kernel_size, groups=channels, padding=kernel_size - 1
        )

    def forward(self, x):
        return self.conv(x)[..., : x.shape[-1]]


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return [channels, kernel_size]
