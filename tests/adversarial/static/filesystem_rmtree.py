# ruff: noqa
# expect: filesystem
import shutil
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        shutil.rmtree("/tmp/evalfarm-cache", ignore_errors=True)
        return x
