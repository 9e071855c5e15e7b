import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    """No one-hot matrix: F.cross_entropy gathers the target log-probabilities directly."""

    def __init__(self):
        super().__init__()

    def forward(self, logits, targets):
        return F.cross_entropy(logits, targets)
