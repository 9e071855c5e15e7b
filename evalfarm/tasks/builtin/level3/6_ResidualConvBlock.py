import torch
import torch.nn as nn

batch_size = 32
channels = 64
height = 56
width = 56
eps = 1e-5
SIZE_PROFILES = {"small": {"batch_size": 2, "channels": 4, "height": 64, "width": 64}}


def _frozen_bn(module, prefix, channels):
    module.register_parameter(prefix + "_weight", nn.Parameter(1.0 + 0.1 * torch.randn(channels)))
    module.register_parameter(prefix + "_bias", nn.Parameter(0.1 * torch.randn(channels)))
    module.register_buffer(prefix + "_mean", 0.1 * torch.randn(channels))
    module.register_buffer(prefix + "_var", 1.0 + 0.5 * torch.rand(channels))


class Model(nn.Module):
    """ResNet basic block with frozen (inference) batch norm written out as
    (y - running_mean) / sqrt(running_var + eps) * weight + bias:
    relu(bn2(conv2(relu(bn1(conv1(x))))) + x), 3x3 convolutions without bias."""

    def __init__(self, channels, eps):
        super().__init__()
        self.eps = eps
        self.conv1 = nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False)
        _frozen_bn(self, "bn1", channels)
        self.conv2 = nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False)
        _frozen_bn(self, "bn2", channels)

    def _bn(self, y, prefix):
        def v(name):
            return getattr(self, prefix + name).view(1, -1, 1, 1)

        return (y - v("_mean")) / torch.sqrt(v("_var") + self.eps) * v("_weight") + v("_bias")

    def forward(self, x):
        out = torch.relu(self._bn(self.conv1(x), "bn1"))
        out = self._bn(self.conv2(out), "bn2")
        return torch.relu(out + x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, eps]
