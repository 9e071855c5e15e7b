import torch
import torch.nn as nn

batch_size = 8
heads = 16
seq_len = 512
scale = 0.125
SIZE_PROFILES = {"small": {"batch_size": 4, "heads": 4, "seq_len": 128}}


class Model(nn.Module):
    """Attention-probability step: softmax(scores * scale + bias) over the last dimension,
    with scores (B, H, S, S) and an additive positional bias (S, S) shared by batch and heads."""

    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, scores, bias):
        x = scores * self.scale
        x = x + bias
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, heads, seq_len, seq_len) * 4.0, torch.randn(seq_len, seq_len)]


def get_init_inputs():
    return [scale]
