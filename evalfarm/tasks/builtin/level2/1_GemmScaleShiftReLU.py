import torch
import torch.nn as nn

batch_size = 8192
in_features = 1024
out_features = 4096
SIZE_PROFILES = {"small": {"batch_size": 1024, "in_features": 32, "out_features": 512}}


class Model(nn.Module):
    """Linear layer, then a per-feature scale and shift, then ReLU:
    relu((x @ W.T + b) * scale + shift)."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = nn.Parameter(torch.randn(out_features))
        self.shift = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        x = self.linear(x)
        x = x * self.scale
        x = x + self.shift
        return torch.relu(x)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
