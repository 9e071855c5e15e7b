# ruff: noqa
# expect: harness_access
import gc
import sys
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        harness = sys.modules["__main__"]
        for obj in gc.get_objects():
            pass
        return x
