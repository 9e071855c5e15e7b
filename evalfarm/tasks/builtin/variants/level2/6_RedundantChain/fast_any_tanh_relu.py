import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """The chain is tanh(relu(x)) = relu(tanh(x)) (tanh is monotone with tanh(0) = 0):
    one tanh and one in-place ReLU."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.tanh(x).relu_()
