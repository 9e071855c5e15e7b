# ruff: noqa
# task: L3/8
# style: algebraic_shortcut, plain_rewrite
# device: any
# expect: OK
# speedup: >=1.0
# why: x * s + x = x * (1 + s); one broadcast multiply and an in-place relu on its fresh output instead of multiply, add, relu
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, channels, reduction):
        super().__init__()
        self.fc1 = nn.Linear(channels, channels // reduction)
        self.fc2 = nn.Linear(channels // reduction, channels)

    def forward(self, x):
        s = x.mean(dim=(2, 3))
        s = torch.sigmoid(self.fc2(torch.relu(self.fc1(s)))).add_(1.0)
        return (x * s[:, :, None, None]).relu_()
