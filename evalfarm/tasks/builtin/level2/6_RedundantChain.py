import torch
import torch.nn as nn

batch_size = 64
seq_len = 512
dim = 512
SIZE_PROFILES = {"small": {"batch_size": 4, "seq_len": 128, "dim": 512}}


class Model(nn.Module):
    """A chain of activations with redundant steps: relu, clamp(min=0), a layout round trip,
    tanh, abs and a final max with 0; the result equals tanh(relu(x))."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.relu(x)
        y = torch.clamp(y, min=0.0)
        y = y.transpose(1, 2).contiguous().transpose(1, 2)
        y = torch.tanh(y)
        y = torch.abs(y)
        y = torch.maximum(y, torch.zeros_like(y))
        return y * 1.0


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return []
