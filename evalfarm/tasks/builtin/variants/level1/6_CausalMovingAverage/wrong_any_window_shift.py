import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    """Off-by-one window: averages x[t - w .. t - 1] (pads by w instead of w - 1)."""

    def __init__(self, window):
        super().__init__()
        self.window = window

    def forward(self, x):
        t = x.shape[-1]
        out = F.avg_pool1d(F.pad(x, (self.window, 0)), kernel_size=self.window, stride=1)
        return out[..., :t].contiguous()
