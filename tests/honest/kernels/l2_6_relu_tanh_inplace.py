# ruff: noqa
# task: L2/6
# style: algebraic_shortcut, plain_rewrite
# device: any
# expect: OK
# speedup: >=1.4
# why: relu already clamps at 0, tanh of a non-negative value is non-negative (abs and max with 0 change nothing), the layout round trip is a no-op: tanh(relu(x)), computed in place on relu's fresh output
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x).tanh_()
