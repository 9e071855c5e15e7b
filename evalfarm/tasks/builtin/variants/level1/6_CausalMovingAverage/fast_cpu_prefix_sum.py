import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    """O(T) moving average from a float64 prefix sum: mean = (S[t] - S[t - w]) / w. Pure PyTorch,
    labelled cpu because on a GPU its float64 passes make it slower than the reference.
    Accumulating in float64 keeps the difference of large prefix sums exact enough."""

    def __init__(self, window):
        super().__init__()
        self.window = window

    def forward(self, x):
        w = self.window
        t = x.shape[-1]
        s = F.pad(torch.cumsum(x, dim=-1, dtype=torch.float64), (w, 0))
        return (s[..., w:] - s[..., :t]).div_(w).to(x.dtype)
