import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """bias + scale * scores in one op (torch.add with alpha), then softmax: one temporary less."""

    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, scores, bias):
        return torch.softmax(torch.add(bias, scores, alpha=self.scale), dim=-1)
