import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Reassociated product whose rank loop stops one component early."""

    def __init__(self):
        super().__init__()

    def forward(self, x, U, V):
        r = U.shape[1] - 1
        return torch.matmul(torch.matmul(x, U[:, :r]), V[:r])
