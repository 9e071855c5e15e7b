# ruff: noqa
# expect: file_access
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        with open("/dev/shm/result.bin", "wb") as f:
            f.write(b"1")
        return x
