import torch
import torch.nn as nn

batch_size = 64
channels = 256
height = 56
width = 56
reduction = 16
SIZE_PROFILES = {"small": {"batch_size": 16, "channels": 64, "height": 24, "width": 24}}


class Model(nn.Module):
    """Squeeze-and-excitation residual unit: channel weights s = sigmoid(fc2(relu(fc1(mean_hw(x))))),
    output relu(x * s + x)."""

    def __init__(self, channels, reduction):
        super().__init__()
        self.fc1 = nn.Linear(channels, channels // reduction)
        self.fc2 = nn.Linear(channels // reduction, channels)

    def forward(self, x):
        s = x.mean(dim=(2, 3))
        s = torch.sigmoid(self.fc2(torch.relu(self.fc1(s))))
        y = x * s[:, :, None, None]
        return torch.relu(y + x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, reduction]
