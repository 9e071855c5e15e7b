import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    """Normalizes over the batch dimension instead of the classes (log_softmax(dim=0))."""

    def __init__(self):
        super().__init__()

    def forward(self, logits, targets):
        return F.nll_loss(torch.log_softmax(logits, dim=0), targets)
