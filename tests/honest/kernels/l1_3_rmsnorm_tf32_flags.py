# ruff: noqa
# task: L1/3
# style: tf32_flags, plain_rewrite
# device: any
# expect: OK
# speedup: >=0.5
# why: the usual TF32 boilerplate in __init__ (no matmul or convolution runs here, so it changes no result); then square, mean, and one multiply by the in-place reciprocal square root
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, num_features, eps):
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    def forward(self, x):
        inv = x.square().mean(dim=1, keepdim=True).add_(self.eps).rsqrt_()
        return x * inv
