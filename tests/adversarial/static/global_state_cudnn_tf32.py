# ruff: noqa
# expect: global_state
import os
import torch
import torch.nn as nn

torch.backends.cudnn.benchmark = False
torch.backends.cuda.matmul.allow_tf32 = True
torch.set_num_threads(1)
os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":0:0"


class ModelNew(nn.Module):
    def forward(self, x):
        return x
