# ruff: noqa
# expect: network
import socket as so
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        so.create_connection(("10.0.0.1", 80))
        return x
