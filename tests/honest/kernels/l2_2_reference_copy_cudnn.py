# ruff: noqa
# task: L2/2
# style: identical_copy, cudnn_benchmark
# device: any
# expect: OK
# speedup: ~1.0
# why: the reference's own layers with torch.backends.cudnn.benchmark = True set in __init__, a common habit; on a CPU the flag does nothing and on a GPU it only chooses among exact float32 algorithms
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        torch.backends.cudnn.benchmark = True
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.pool = nn.AvgPool2d(kernel_size=2)

    def forward(self, x):
        return self.pool(self.conv(x))
